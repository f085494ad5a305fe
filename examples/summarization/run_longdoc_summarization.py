#!/usr/bin/env python
"""LongDoc BART on long-document summarization: BART with the neighborhood or convolutional encoder
attention of Kosaraju, Ang and Nabulsi's report (§2.3), trained with `Seq2SeqTrainer` and scored on every
validation row with ROUGE-1/2/L and perplexity, lead-1 and lead-3 beside.

HF examples conventions (`HfArgumentParser`, `Seq2SeqTrainingArguments`, `--do_train`/`--do_eval`,
`--max_train_samples`/`--max_eval_samples`, `--train_file`/`--validation_file`). Without `--model_name_or_path` the
packaged all-MiniLM-L6-v2 BERT is converted to BART and loaded into LongDoc BART (a `bart` or `longdoc_bart`
checkpoint loads directly). `--max_document_length` tokens are read; positions beyond the checkpoint's learned
table (512 for MiniLM) are added by copying its rows, as Longformer did.

    python examples/summarization/run_longdoc_summarization.py \\
      --train_file ../shared/data/xsum/train.jsonl --validation_file ../shared/data/xsum/validation.jsonl \\
      --encoder_attention_type neighborhood --neighborhood_radius 100 --max_document_length 1024 \\
      --do_train --do_eval --max_steps 300 --per_device_train_batch_size 8 --learning_rate 1e-4 \\
      --activation_checkpointing --use_cpu --report_to none --save_strategy no --output_dir runs/longdoc_neighborhood

Other types: `--encoder_attention_type full|convolutional|convolutional_per_head|neighborhood_convolutional`
(`--conv_kernel_size 3 --conv_stride 3`), `--decoder_attention_type neighborhood`. The metrics are written to
`output_dir/longdoc_results.json`. `xsum_table.sh` runs the four attention types at one budget; its 60-step CPU
run (README, `benchmarks/results/xsum_table/`) is far too short: every type stays below lead-3.
"""

import sys

from transformers import HfArgumentParser, Seq2SeqTrainingArguments

from hf_readonce.recipes.longdoc_summarization import LongDocSummarizationArguments, run


def main(argv=None):
    parser = HfArgumentParser((LongDocSummarizationArguments, Seq2SeqTrainingArguments))
    args, training_args = parser.parse_args_into_dataclasses(args=argv)
    return run(args, training_args)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
