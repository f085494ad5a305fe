#!/usr/bin/env python
"""ReadOnce BART on QA as generation (question as text, passage as ReadOnce representations).

HF examples conventions (`HfArgumentParser`, `Seq2SeqTrainingArguments`). Two stages, as in the paper (§3.3, §3.4):
stage 1 trains the document encoder and the representation+text model jointly; with `--stage2_steps N` the document
encoder is then frozen, every document's representations are computed once into a `RepresentationStore`
(`--store_dir`), and the representation+text model is fine-tuned and evaluated on the stored representations.
`--variant baseline` trains the same warm start as plain BART on question + document text.

    python examples/readonce/run_readonce_qa.py --train_file ../shared/data/disfl_qa/train.jsonl,../shared/data/quoref/train.jsonl \\
      --validation_file ../shared/data/disfl_qa/validation.jsonl --compression_ratio 8 \\
      --do_train --do_eval --max_steps 150 --per_device_train_batch_size 16 --learning_rate 1e-4 --use_cpu \\
      --report_to none --save_strategy no --output_dir runs/readonce_qa_k8

Without `--model_name_or_path` the packaged all-MiniLM-L6-v2 BERT is converted to BART (`hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart`).
"""

import sys

from transformers import HfArgumentParser, Seq2SeqTrainingArguments

from hf_readonce.recipes.readonce import ReadOnceArguments, check_arguments, run


def main(argv=None):
    parser = HfArgumentParser((ReadOnceArguments, Seq2SeqTrainingArguments))
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--task" or a.startswith("--task=") for a in argv):
        parser.error("--task is this script's own (qa); for the other task run run_readonce_summarization.py")
    args, training_args = parser.parse_args_into_dataclasses(args=argv)
    args.task = "qa"
    try:  # a bad setting or a missing file: a usage message naming the argument, not a traceback
        check_arguments(args, training_args)
    except (ValueError, TypeError, FileNotFoundError) as error:
        parser.error(str(error))
    return run(args, training_args)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
