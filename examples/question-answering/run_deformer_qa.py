#!/usr/bin/env python
"""Fine-tune a DeFormer-BERT (or, with --num_decomposed_layers 0, plain BERT) for extractive QA on SQuAD-style
JSONL, then answer the validation questions twice: reading every question+passage pair (no cache), and from
passage states encoded once per passage window (cache). Prints EM/F1 of both and the measured speed-up.

Passage windows are cut from the passage alone (`--max_seq_length - --max_question_length` tokens, consecutive
windows sharing `--doc_stride` tokens), so one set of cached states serves every question about a passage.

Example (the paper's recipe: decompose the shipped reference QA model, a full MiniLM fine-tuned on Quoref +
Disfl-QA, into k = 4 of 6 and distil it with KD + LRS; tune the no-answer threshold on 10% of the train passages):

    REF=$(python -c "from hf_readonce.weights import reference_qa_path; print(reference_qa_path())")
    python examples/question-answering/run_deformer_qa.py \
        --model_name_or_path $REF --teacher_model_name_or_path $REF --num_decomposed_layers 4 \
        --train_file ../shared/data/disfl_qa/train.jsonl --validation_file ../shared/data/disfl_qa/validation.jsonl \
        --allow_no_answer --calibration_fraction 0.1 --max_seq_length 256 --max_question_length 48 \
        --doc_stride 64 --do_train --do_eval --max_steps 300 --per_device_train_batch_size 16 \
        --learning_rate 5e-5 --use_cpu --output_dir runs/deformer_kd

The metrics (`output_dir/eval_results.json`) hold the model's EM/F1 with SQuAD 2.0's HasAns / NoAns breakdown and,
under `baselines`, the always-empty / first-span / first-sentence scores of the same questions.
"""

import json
import logging
import sys

from transformers import HfArgumentParser, TrainingArguments

from hf_readonce.deformer_qa import DataArguments, ModelArguments, run


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
