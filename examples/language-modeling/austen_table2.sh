#!/bin/bash
# Table 2 on Jane Austen with SmolLM2-135M: baseline vs recurrent, same budget (50 steps x 1,024 tokens), window 128.
# Protocol of the paper (§4.2, §5): the baseline is trained once and evaluated at overlaps 0, 5 and 30; a recurrent
# model is trained at the overlap it is tested with, so every recurrent row is three runs (one per overlap).
# STEPS=2000 bash examples/language-modeling/austen_table2.sh   # the full budget (GPU: drop --use_cpu)
set -e
STEPS=${STEPS:-50}
OVERLAPS=${OVERLAPS:-"0 5 30"}
COMMON="--window_size 128 --windows_per_sample 4 --max_steps $STEPS --per_device_train_batch_size 2 --learning_rate 1e-4 \
  --warmup_steps 5 --bf16 --use_cpu --seed 42 --do_train --do_eval --max_eval_tokens 16384 --save_strategy no \
  --report_to none --logging_steps 10"
python examples/language-modeling/run_recurrent_lm.py $COMMON --recurrent false --eval_overlaps "$(echo $OVERLAPS | tr ' ' ,)" \
  --output_dir runs/austen_baseline
for overlap in $OVERLAPS; do
  python examples/language-modeling/run_recurrent_lm.py $COMMON --recurrent true --train_window_overlap "$overlap" \
    --output_dir "runs/austen_recurrent_ov$overlap"
  python examples/language-modeling/run_recurrent_lm.py $COMMON --recurrent true --train_window_overlap "$overlap" \
    --recurrence_learning_rate 2e-3 --output_dir "runs/austen_recurrent_lr2e-3_ov$overlap"
done
python examples/language-modeling/run_recurrent_lm.py --window_size 128 --recurrent false --do_eval --use_cpu \
  --max_eval_tokens 16384 --eval_overlaps "$(echo $OVERLAPS | tr ' ' ,)" --report_to none --output_dir runs/austen_pretrained
