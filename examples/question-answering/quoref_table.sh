#!/usr/bin/env bash
# The README's Quoref table: full fine-tune vs DeFormer k = 4 with and without KD + LRS, every row
# from all-MiniLM-L6-v2 with the same budget (STEPS steps of 16 windows on quoref/train.jsonl), all 1,299 validation
# questions scored. Row 3's teacher is row 1. Each run writes <OUT>/<row>/eval_results.json (with the baselines),
# recorded with its command, step count and hardware as <OUT>/<row>.json; copied to benchmarks/results/quoref_table/,
# model_cards/generate.py builds model_cards/deformer-minilm-l6-quoref.md from the three.
# BF16=1 trains under bf16 autocast: only where the CPU has native bf16 (AVX-512 BF16 or AMX; on AVX2-only CPUs
# bf16 is emulated and many times slower than fp32); the default is fp32.
#   BF16=1 OUT=runs/quoref_table bash examples/question-answering/quoref_table.sh
set -euo pipefail
STEPS=${STEPS:-300}
OUT=${OUT:-runs/quoref_table}
SEED=${SEED:-42}
WARMUP=${WARMUP:-30}
PY=${PYTHON:-python}
PRECISION=""
if [ "${BF16:-0}" = "1" ]; then PRECISION="--bf16"; fi
COMMON="--train_file ../shared/data/quoref/train.jsonl --validation_file ../shared/data/quoref/validation.jsonl
  --do_train --do_eval --max_seq_length 256 --max_question_length 48 --doc_stride 64 --max_steps $STEPS
  --per_device_train_batch_size 16 --learning_rate 1e-4 --warmup_steps $WARMUP --weight_decay 0.01 $PRECISION --use_cpu
  --attention_probs_dropout_prob 0 --seed $SEED --save_strategy no --report_to none --logging_steps 50"
# shellcheck disable=SC2086
$PY examples/question-answering/run_deformer_qa.py $COMMON --num_decomposed_layers 0 --eval_paths pairs \
  --output_dir "$OUT/full"
# shellcheck disable=SC2086
$PY examples/question-answering/run_deformer_qa.py $COMMON --num_decomposed_layers 4 --eval_paths cached \
  --output_dir "$OUT/deformer"
# shellcheck disable=SC2086
$PY examples/question-answering/run_deformer_qa.py $COMMON --num_decomposed_layers 4 --eval_paths cached \
  --teacher_model_name_or_path "$OUT/full" --output_dir "$OUT/deformer_kd"
for row in full deformer deformer_kd; do
  $PY - "$OUT" "$row" "$STEPS" "$COMMON" <<'PYEOF'
import json, sys
from hf_readonce.recipes.reference_qa import hardware_description
out, row, steps, common = sys.argv[1:]
extra = {"full": "--num_decomposed_layers 0 --eval_paths pairs",
         "deformer": "--num_decomposed_layers 4 --eval_paths cached",
         "deformer_kd": f"--num_decomposed_layers 4 --eval_paths cached --teacher_model_name_or_path {out}/full"}[row]
record = json.load(open(f"{out}/{row}/eval_results.json"))
record.update(command="python examples/question-answering/run_deformer_qa.py " + " ".join(common.split())
              + f" {extra} --output_dir {out}/{row}", max_steps=int(steps), batch_size=16,
              hardware=hardware_description())
json.dump(record, open(f"{out}/{row}.json", "w"), indent=2)
PYEOF
done
