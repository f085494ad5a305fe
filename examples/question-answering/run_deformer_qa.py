#!/usr/bin/env python
"""Fine-tune a DeFormer-BERT (or, with --num_decomposed_layers 0, plain BERT) for extractive QA on SQuAD-style
JSONL, then answer the validation questions twice: reading every question+passage pair (no cache), and from
passage states encoded once per passage window (cache). Prints EM/F1 of both and the measured speed-up.

Passage windows are cut from the passage alone (`--max_seq_length - --max_question_length` tokens, consecutive
windows sharing `--doc_stride` tokens), so one set of cached states serves every question about a passage.

Example (the packaged MiniLM, quoref, k=4 of 6, distilled from a fully fine-tuned teacher in runs/full):

    python examples/question-answering/run_deformer_qa.py \
        --train_file ../shared/data/quoref/train.jsonl --validation_file ../shared/data/quoref/validation.jsonl \
        --do_train --do_eval --num_decomposed_layers 4 --teacher_model_name_or_path runs/full \
        --max_steps 300 --per_device_train_batch_size 16 --learning_rate 1e-4 --output_dir runs/deformer_kd
"""

import json
import logging
import sys

from transformers import HfArgumentParser, TrainingArguments

from hf_readonce.recipes.deformer_qa import DataArguments, ModelArguments, run


def main(argv=None):
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(
        args=sys.argv[1:] if argv is None else argv
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    metrics = run(model_args, data_args, training_args)
    print(json.dumps(metrics, indent=2))
    return metrics


if __name__ == "__main__":
    main()
