#!/bin/bash
# ReadOnce learning runs: baseline BART vs ReadOnce k=2 and k=8, same MiniLM->BART warm start, same budget.
set -e
D=../shared/data
COMMON="--do_train --do_eval --max_steps 40 --per_device_train_batch_size 16 --learning_rate 2e-4 --warmup_steps 4 \
  --use_cpu --seed 42 --report_to none --save_strategy no --logging_steps 10 --max_document_length 256"
QA="--train_file $D/disfl_qa/train.jsonl,$D/quoref/train.jsonl --validation_file $D/disfl_qa/validation.jsonl \
  --max_eval_samples 200 --max_target_length 24 --generation_max_tokens 24"
SUM="--train_file $D/xsum/train.jsonl --validation_file $D/xsum/validation.jsonl --max_eval_samples 60 \
  --max_target_length 48 --generation_max_tokens 48"
python examples/readonce/run_readonce_qa.py $COMMON $QA --variant baseline --output_dir runs/ro_qa_base
python examples/readonce/run_readonce_qa.py $COMMON $QA --compression_ratio 2 --output_dir runs/ro_qa_k2
python examples/readonce/run_readonce_qa.py $COMMON $QA --compression_ratio 8 --eval_compression_ratios 2,4,16 --output_dir runs/ro_qa_k8
python examples/readonce/run_readonce_summarization.py $COMMON $SUM --variant baseline --output_dir runs/ro_sum_base
python examples/readonce/run_readonce_summarization.py $COMMON $SUM --compression_ratio 2 --output_dir runs/ro_sum_k2
python examples/readonce/run_readonce_summarization.py $COMMON $SUM --compression_ratio 8 --output_dir runs/ro_sum_k8
