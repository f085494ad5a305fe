#!/bin/bash
# Table 2 on Jane Austen with SmolLM2-135M: baseline vs recurrent, same budget (50 steps x 1,024 tokens), window 128.
set -e
COMMON="--window_size 128 --windows_per_sample 4 --max_steps 50 --per_device_train_batch_size 2 --learning_rate 1e-4 \
  --warmup_steps 5 --bf16 --use_cpu --seed 42 --do_train --do_eval --max_eval_tokens 16384 --save_strategy no \
  --report_to none --logging_steps 10 --eval_overlaps 0,5,30"
python examples/language-modeling/run_recurrent_lm.py $COMMON --recurrent false --output_dir runs/austen_baseline
python examples/language-modeling/run_recurrent_lm.py $COMMON --recurrent true --output_dir runs/austen_recurrent
python examples/language-modeling/run_recurrent_lm.py $COMMON --recurrent true --recurrence_learning_rate 2e-3 \
  --output_dir runs/austen_recurrent_lr2e-3
python examples/language-modeling/run_recurrent_lm.py --window_size 128 --recurrent false --do_eval --use_cpu \
  --max_eval_tokens 16384 --eval_overlaps 0,5,30 --report_to none --output_dir runs/austen_pretrained
