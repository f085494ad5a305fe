#!/usr/bin/env python
"""Fine-tune ReadTwice-BERT (Zemlyanskiy et al., 2021) for extractive QA over long documents split into segments,
or, with --baseline, the segment-independent BERT baseline trained with the same globally normalised OR-model loss
(eq. 7) and decoded with the same cross-segment n-best; then report SQuAD EM/F1 on the validation file beside the
no-learning baselines (first span = first 3 words, first sentence, and first capitalised mention).

Documents are split into `--segment_length`-token segments sharing `--segment_overlap` tokens (HF's doc_stride
preprocessing). With --question_in_first_read True (the paper's setup) every segment is `[CLS] question [SEP] part
[SEP]`; with False (read-once) segments hold the document only and the question is read once, alone.

Entity memories (--memory_type entity) need mentions: --entity_source capitalized uses a capitalisation heuristic
(NOT an NER; no NER pipeline with sound provenance is installable from PyPI here), --entity_source spacy:NAME uses a
spaCy pipeline you installed yourself.

Examples (the packaged MiniLM warm start, Quoref, segments of 128 with overlap 32; same budget for every row):

    python examples/question-answering/run_readtwice_qa.py --output_dir runs/rt_e --do_train --do_eval \
        --memory_type entity --entity_source capitalized --max_steps 1500 --per_device_train_batch_size 16 \
        --learning_rate 1e-4 --warmup_ratio 0.1 --weight_decay 0.01
    python examples/question-answering/run_readtwice_qa.py --output_dir runs/baseline --baseline --do_train --do_eval \
        --max_steps 1500 --per_device_train_batch_size 16 --learning_rate 1e-4 --warmup_ratio 0.1 --weight_decay 0.01

Smoke test: add `--max_steps 2 --max_train_samples 8 --max_eval_samples 8`.
"""

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import AutoTokenizer, HfArgumentParser, Trainer, TrainingArguments, set_seed

from hf_readonce import ReadTwiceBertForQuestionAnswering
from hf_readonce.tasks.question_answering import format_scores, load_qa_examples, squad_em_f1, trivial_baselines
from hf_readonce.tasks.readtwice_qa import (
    GlobalNormBertForQuestionAnswering,
    ReadTwiceQACollator,
    capitalized_mentions,
    first_mention_baseline,
    postprocess_readtwice_qa,
    predict_readtwice_qa,
    prepare_readtwice_qa_features,
    spacy_mentions,
)
from hf_readonce.tasks.trainers import TimeBudgetCallback

logger = logging.getLogger(__name__)
DATA = os.path.join("..", "shared", "data", "quoref")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default=None, metadata={"help": "BERT or ReadTwice checkpoint; defaults to the packaged MiniLM (L6, H384)."}
    )
    baseline: bool = field(default=False, metadata={"help": "Segment-independent BERT with global normalisation."})
    memory_type: str = field(default="entity", metadata={"help": "cls | sts | entity"})
    single_segment: bool = field(default=False, metadata={"help": "SS ablation: segments see only their memories."})
    # 100 here (the recorded readtwice_table runs rely on it), although the model's own default is dense (None): the
    # paper uses top-k = 100 only for NarrativeQA fine-tuning (App. C.4); pass 0 for dense MemoryAttention.
    memory_top_k: int = field(default=100, metadata={
        "help": "Sparse MemoryAttention k (the paper's NarrativeQA setting, App. C.4); 0 means dense."})
    span_length: int = field(default=32, metadata={"help": "STS span length."})
    num_second_read_layers: int = field(default=2)
    max_relative_segment_distance: int = field(default=10)
    question_in_first_read: bool = field(default=True, metadata={"help": "False: read-once layout."})
    memory_output_init: str = field(default="identity", metadata={"help": "identity | zero"})
    entity_source: str = field(
        default="capitalized", metadata={"help": "capitalized (heuristic, not NER) | spacy:<installed pipeline>"}
    )


@dataclass
class DataArguments:
    train_file: str = field(default=os.path.join(DATA, "train.jsonl"))
    validation_file: str = field(default=os.path.join(DATA, "validation.jsonl"))
    segment_length: int = field(default=128)
    segment_overlap: int = field(default=32)
    max_question_length: int = field(default=64, metadata={
        "help": "Questions are cut to this many tokens ([CLS] and [SEP] included in the read-once layout); recorded "
                "in a ReadTwice checkpoint's config (not the --baseline's)."})
    max_segments: int = field(default=128, metadata={"help": "Segments kept per document (paper: 128)."})
    max_train_samples: int = field(default=None)
    max_eval_samples: int = field(default=None)
    n_best_size: int = field(default=20)
    max_answer_length: int = field(default=30)
    eval_batch_size: int = field(default=16, metadata={"help": "Documents per prediction batch."})
    train_time_budget_s: float = field(default=None, metadata={
        "help": "Stop training once this many seconds have passed (TimeBudgetCallback); train_steps records the "
                "steps reached."})


def mention_function(model_args):
    if model_args.baseline or model_args.memory_type != "entity":
        return None
    source = model_args.entity_source
    if source == "capitalized":
        return capitalized_mentions
    if source.startswith("spacy:"):
        import spacy  # optional, installed by the user

        return spacy_mentions(spacy.load(source.split(":", 1)[1]))
    raise ValueError(f"--entity_source must be 'capitalized' or 'spacy:<name>', got {source!r}.")


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments,
        command: str | None = None) -> dict:
    training_args.remove_unused_columns = False
    path = model_args.model_name_or_path
    if path is None:
        from hf_readonce.weights import minilm_path

        path = str(minilm_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    question_in_first_read = model_args.baseline or model_args.question_in_first_read
    mentions = mention_function(model_args)
    with_entities = not model_args.baseline and model_args.memory_type == "entity"

    def features_of(file, limit, training=False):
        examples, skipped = load_qa_examples(file, limit=limit, check_answers=training)  # gold spans: training only
        if skipped:
            logger.warning("%s: skipped %d unusable rows", file, len(skipped))
        features = prepare_readtwice_qa_features(
            tokenizer, examples, data_args.segment_length, data_args.segment_overlap, question_in_first_read,
            data_args.max_question_length, mentions if with_entities else None, data_args.max_segments,
            check_answers=training,
        )
        counts = [f.num_segments for f in features]
        logger.info("%s: %d documents, %.2f segments per document on average (max %d), %.1f%% with >1 segment",
                    file, len(features), float(np.mean(counts)), max(counts), 100 * float(np.mean(np.array(counts) > 1)))
        return examples, features

    # seeded before the model is built: the weights the warm start lacks (second read, memory layers, QA heads) are
    # drawn at load time, before Trainer seeds anything, so without this `--seed` left them (and every figure) to chance
    set_seed(training_args.seed)
    # float32 weights whatever the checkpoint's saved dtype: transformers loads a float16 checkpoint (such as the
    # fp16 warm start a GPU lease carries) as float16, and AdamW on float16 weights does not learn (`--bf16` is
    # autocast over float32 master weights).
    if model_args.baseline:
        model = GlobalNormBertForQuestionAnswering.from_pretrained(path, dtype=torch.float32)
    else:
        model = ReadTwiceBertForQuestionAnswering.from_pretrained(
            path,
            dtype=torch.float32,
            memory_type=model_args.memory_type,
            single_segment=model_args.single_segment,
            memory_top_k=model_args.memory_top_k or None,
            span_length=model_args.span_length,
            num_second_read_layers=model_args.num_second_read_layers,
            max_relative_segment_distance=model_args.max_relative_segment_distance,
            question_in_first_read=question_in_first_read,
            memory_output_init=model_args.memory_output_init,
            segment_length=data_args.segment_length,
            segment_overlap=data_args.segment_overlap,
            # recorded, as run_deformer_qa.py records it: the default of `hf-readonce answer` and of the pipeline
            max_question_length=data_args.max_question_length,
        )
    if with_entities and model_args.entity_source == "capitalized":
        # recorded, as the ReadOnce and LongDoc recipes record their reading settings: `hf-readonce encode`,
        # `answer` and `publish` read the mention finder from the checkpoint (a spaCy model cannot be named there)
        model.config.mentions = "capitalized_mentions"
    collator = ReadTwiceQACollator(tokenizer.pad_token_id, with_entities=with_entities)
    metrics = {"model": "baseline" if model_args.baseline else f"readtwice-{model_args.memory_type}"
               + ("(SS)" if model_args.single_segment else "") + ("" if question_in_first_read else "-read-once"),
               "num_parameters": sum(p.numel() for p in model.parameters())}
    if command:
        metrics["command"] = command
    if training_args.do_train:
        _, train_features = features_of(data_args.train_file, data_args.max_train_samples, training=True)
        metrics["train_segments_per_document"] = float(np.mean([f.num_segments for f in train_features]))
        callbacks = [TimeBudgetCallback(data_args.train_time_budget_s)] if data_args.train_time_budget_s else None
        trainer = Trainer(model=model, args=training_args, train_dataset=train_features, data_collator=collator,
                          callbacks=callbacks)
        result = trainer.train()
        metrics.update(result.metrics)
        metrics["train_steps"] = result.global_step
        metrics["train_questions"] = len(train_features)
        trainer.save_model()
        tokenizer.save_pretrained(training_args.output_dir)
    if training_args.do_eval:
        examples, features = features_of(data_args.validation_file, data_args.max_eval_samples)
        model.to(training_args.device)
        begin = time.perf_counter()
        logits = predict_readtwice_qa(model, features, collator, data_args.eval_batch_size)
        predictions = postprocess_readtwice_qa(examples, features, logits, data_args.n_best_size,
                                               data_args.max_answer_length)
        metrics["eval_seconds"] = time.perf_counter() - begin
        metrics["eval_examples"] = len(examples)
        metrics["eval_segments_per_document"] = float(np.mean([f.num_segments for f in features]))
        metrics.update({f"eval_{k}": v for k, v in squad_em_f1(predictions, examples).items()})
        baselines = trivial_baselines(examples)
        baselines["first_mention"] = squad_em_f1(first_mention_baseline(examples), examples)
        for name, scores in baselines.items():
            metrics.update({f"{name}_baseline_{k}": v for k, v in scores.items() if k in ("exact_match", "f1")})
        print(format_scores(metrics["model"], {"exact_match": metrics["eval_exact_match"], "f1": metrics["eval_f1"]}))
        for name, scores in baselines.items():
            print(format_scores(f"{name} baseline", scores))
        print(f"({len(examples)} questions)")
    os.makedirs(training_args.output_dir, exist_ok=True)
    with open(os.path.join(training_args.output_dir, "readtwice_results.json"), "w") as handle:
        json.dump(metrics, handle, indent=2)
    return metrics


def main(argv=None):
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    metrics = run(model_args, data_args, training_args,
                  command=" ".join(["python", "examples/question-answering/run_readtwice_qa.py", *argv]))
    print(json.dumps(metrics, indent=2))
    return metrics


if __name__ == "__main__":
    main()
