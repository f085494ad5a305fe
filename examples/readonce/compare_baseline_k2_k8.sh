#!/bin/bash
# ReadOnce learning runs: baseline BART vs ReadOnce k=2 and k=8, same MiniLM->BART warm start, same budget.
#
# 1. QA as generation: train on disfl_qa + quoref train (question as text; ReadOnce: the passage as representations,
#    document encoder and representation+text model trained jointly, §3.3); score EM/F1 on both validation sets.
#    The k=8 model is also scored at k = 2, 4, 16 (k changed at inference, §5.2).
# 2. Summarization: each QA model is fine-tuned on XSum train with the same budget ("summary" as the text). The
#    baseline trains end to end on summary + article text; ReadOnce freezes its document encoder, stores every
#    article's representations once in a RepresentationStore and trains the representation+text model on them (§3.4).
#
# Environment: DATA (default ../shared/data), MODEL (a BERT folder; default: the packaged MiniLM), RUNS (output
# folder), QA_STEPS, SUM_STEPS, EXTRA (extra Seq2SeqTrainingArguments; default --use_cpu; on a GPU e.g. --bf16),
# STAGES ("qa xsum" by default; "xsum" alone reuses the QA models already in $RUNS; "xsum_warm" starts every XSum
# run from the warm start instead: the baseline trains end to end, ReadOnce only trains stage 2 on representations of
# the untrained, frozen document encoder), LR (default 4e-4), QA_VARIANTS (default "baseline 2 8").
set -euo pipefail
D=${DATA:-../shared/data}
RUNS=${RUNS:-runs/readonce}
QA_STEPS=${QA_STEPS:-2000}
SUM_STEPS=${SUM_STEPS:-500}
LR=${LR:-4e-4}
QA_VARIANTS=${QA_VARIANTS:-baseline 2 8}
EXTRA=${EXTRA:---use_cpu}
STAGES=${STAGES:-qa xsum}
MODEL_ARG=${MODEL:+--model_name_or_path $MODEL}
COMMON="--do_train --do_eval --per_device_train_batch_size 32 --per_device_eval_batch_size 128 --learning_rate $LR
  --warmup_steps 100 --weight_decay 0.01 --seed 42 --report_to none --save_strategy no --logging_steps 250
  --max_document_length 256 $EXTRA"
QA="--train_file $D/disfl_qa/train.jsonl,$D/quoref/train.jsonl
  --validation_file $D/disfl_qa/validation.jsonl,$D/quoref/validation.jsonl --max_target_length 24
  --generation_max_tokens 24 --max_steps $QA_STEPS"
SUM="--train_file $D/xsum/train.jsonl --validation_file $D/xsum/validation.jsonl --max_target_length 64
  --generation_max_tokens 64"
QA_RUN=examples/readonce/run_readonce_qa.py
SUM_RUN=examples/readonce/run_readonce_summarization.py

if [[ " $STAGES " == *" qa "* ]]; then
  for v in $QA_VARIANTS; do
    if [ "$v" = baseline ]; then
      python $QA_RUN $COMMON $QA $MODEL_ARG --variant baseline --output_dir $RUNS/qa_baseline
    else
      python $QA_RUN $COMMON $QA $MODEL_ARG --compression_ratio $v --eval_compression_ratios 2,4,8,16 \
        --output_dir $RUNS/qa_k$v
    fi
  done
fi
if [[ " $STAGES " == *" xsum "* ]]; then
  python $SUM_RUN $COMMON $SUM --model_name_or_path $RUNS/qa_baseline --variant baseline --max_steps $SUM_STEPS \
    --output_dir $RUNS/xsum_baseline
  for k in 2 8; do
    python $SUM_RUN $COMMON $SUM --model_name_or_path $RUNS/qa_k$k --stage1_steps 0 --stage2_steps $SUM_STEPS \
      --max_steps $SUM_STEPS --output_dir $RUNS/xsum_k$k
  done
fi
if [[ " $STAGES " == *" xsum_warm "* ]]; then
  python $SUM_RUN $COMMON $SUM $MODEL_ARG --variant baseline --max_steps $SUM_STEPS --output_dir $RUNS/xsum_warm_baseline
  for k in 2 8; do
    python $SUM_RUN $COMMON $SUM $MODEL_ARG --compression_ratio $k --stage1_steps 0 --stage2_steps $SUM_STEPS \
      --max_steps $SUM_STEPS --output_dir $RUNS/xsum_warm_k$k
  done
fi
