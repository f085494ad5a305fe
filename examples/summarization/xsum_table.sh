#!/usr/bin/env bash
# The quality table: LongDoc BART with full, neighborhood (r = 100), convolutional (kernel 3, stride 3) and
# convolutional-per-head encoder attention, every row warm-started from the packaged all-MiniLM-L6-v2 (bert_to_bart)
# with the same budget (STEPS steps of BATCH XSum train documents, up to 1,024 tokens each), all 205 validation
# documents scored (ROUGE-1/2/L, perplexity, lead-1/lead-3 beside). Each run writes
# <OUT>/<type>/longdoc_results.json and the heatmap <OUT>/<type>/attention_<type>.png of the first validation document.
# BF16=1 trains under bf16 autocast (only where the CPU has native bf16); the default is fp32.
#   STEPS=150 OUT=runs/xsum_table bash examples/summarization/xsum_table.sh
set -euo pipefail
STEPS=${STEPS:-300}
BATCH=${BATCH:-8}
OUT=${OUT:-runs/xsum_table}
SEED=${SEED:-42}
TYPES=${TYPES:-"full neighborhood convolutional convolutional_per_head"}
PY=${PYTHON:-python}
PRECISION=""
if [ "${BF16:-0}" = "1" ]; then PRECISION="--bf16"; fi
for type in $TYPES; do
  # shellcheck disable=SC2086
  $PY examples/summarization/run_longdoc_summarization.py \
    --train_file ../shared/data/xsum/train.jsonl --validation_file ../shared/data/xsum/validation.jsonl \
    --encoder_attention_type "$type" --neighborhood_radius 100 --conv_kernel_size 3 --conv_stride 3 \
    --max_document_length 1024 --do_train --do_eval --max_steps "$STEPS" --per_device_train_batch_size "$BATCH" \
    --learning_rate 1e-4 --warmup_steps 20 --seed "$SEED" $PRECISION --attention_heatmap_tokens 256 --use_cpu \
    --report_to none --save_strategy no --logging_steps 25 --output_dir "$OUT/$type"
done
