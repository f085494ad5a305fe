#!/usr/bin/env bash
# The ReadTwice Quoref table: the segment-independent MiniLM baseline with global normalisation,
# ReadTwice-CLS, -STS, -E, -E(SS) and -E read-once, every row from the packaged all-MiniLM-L6-v2 with the same budget
# (STEPS steps of BATCH questions, each cut into 128-token segments with overlap 32), all 1,299 validation questions
# scored beside the no-learning baselines. Each run writes <OUT>/<row>/readtwice_results.json; the command of each row
# is recorded in it. Copy them to benchmarks/results/readtwice_table/ and run model_cards/generate.py.
# BF16=1 trains under bf16 autocast (only where the CPU has native bf16: AVX-512 BF16 or AMX); the default is fp32.
#   BF16=1 OUT=runs/readtwice_table bash examples/question-answering/readtwice_table.sh
# Rows to run can be chosen: ROWS="baseline e e_ss" ...
set -euo pipefail
STEPS=${STEPS:-200}
BATCH=${BATCH:-8}
OUT=${OUT:-runs/readtwice_table}
SEED=${SEED:-42}
WARMUP=${WARMUP:-20}
ROWS=${ROWS:-"baseline cls sts e e_ss e_ro"}
PY=${PYTHON:-python}
PRECISION=""
if [ "${BF16:-0}" = "1" ]; then PRECISION="--bf16"; fi
COMMON="--do_train --do_eval --segment_length 128 --segment_overlap 32 --max_steps $STEPS
  --per_device_train_batch_size $BATCH --learning_rate 1e-4 --warmup_steps $WARMUP --weight_decay 0.01 $PRECISION
  --use_cpu --seed $SEED --save_strategy no --report_to none --logging_steps 20"
for row in $ROWS; do
  case $row in
    baseline) ARGS="--baseline" ;;
    cls) ARGS="--memory_type cls" ;;
    sts) ARGS="--memory_type sts" ;;
    e) ARGS="--memory_type entity --entity_source capitalized" ;;
    e_ss) ARGS="--memory_type entity --entity_source capitalized --single_segment" ;;
    e_ro) ARGS="--memory_type entity --entity_source capitalized --question_in_first_read False" ;;
    *) echo "unknown row $row" >&2; exit 2 ;;
  esac
  # shellcheck disable=SC2086
  $PY examples/question-answering/run_readtwice_qa.py $ARGS $COMMON --output_dir "$OUT/$row"
done
