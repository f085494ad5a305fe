"""Training and evaluation pipeline of ReadOnce BART on QA-as-generation and summarization, shared by
`examples/readonce/run_readonce_qa.py` and `run_readonce_summarization.py`.

Variants, all from the same warm start (a BART built from a BERT checkpoint, [`hf_readonce.models.readonce_bart.convert_bert_to_readonce_bart`]):

- `baseline`: plain BART reading `[CLS] question [SEP] document [SEP]` as text (the representation+text model with no
  representations is exactly BART; its document encoder, which reads nothing, is frozen);
- `readonce`: the question as text and the document as ReadOnce representations (k = `compression_ratio`).
  Stage 1 trains both parts jointly (the document encoder reads the tokens, §3.3). With `stage2_steps > 0`, stage 2
  freezes the document encoder, stores every training and validation document's representations once in a
  [`RepresentationStore`], and fine-tunes the representation+text model on them (§3.4); evaluation then reads the
  validation representations from the store.

Training recipe (§3.3, §4.1, §5.2, §5.5): the optimizer is the model's `optimizer_parameter_groups()` (pretrained
weights at `bart_learning_rate`, the new aggregation at `new_learning_rate`, 10x by default); several train files
are balanced with `datasets.interleave_datasets`; `compression_ratio` on a ReadOnce checkpoint fine-tunes it at that
k; documents are read up to the model's T·k capacity, longer than one chunk in chunks.

Metrics: SQuAD EM/F1 for QA, ROUGE-L (F-measure, percent) for summarization, both from torchmetrics, and the
teacher-forced loss of the gold targets before and after training; the training time per batch (median) and of each
stage (`stage<n>_train_seconds`, the Trainer's `train_runtime`) are recorded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoTokenizer, Seq2SeqTrainer, Seq2SeqTrainingArguments

from ..models.readonce_bart.configuration_readonce_bart import ReadOnceBartConfig
from ..models.readonce_bart.convert_bert_to_readonce_bart import readonce_bart_from_bert
from ..models.readonce_bart.modeling_readonce_bart import ReadOnceBartForConditionalGeneration
from ..representations.base import check_positive_ints
from ..representations.fill import fill_store
from ..representations.readonce_bart import ReadOnceBartAdapter
from ..store import RepresentationStore, content_hash
from ..tasks.jsonl import field_problem
from ..tasks.question_answering import (
    first_sentence_predictions,
    first_span_predictions,
    read_jsonl,
)
from ..tasks.summarization import lead_baselines, lead_sentences, rouge_scores
from ..tasks.trainers import DecoderInputsCollator, TimeBudgetCallback, trained_model
from ..weights import minilm_path


@dataclass
class ReadOnceArguments:
    """Model, data and evaluation arguments of the ReadOnce examples (the training ones are
    `Seq2SeqTrainingArguments`)."""

    task: str = field(default="qa", metadata={"help": "qa or summarization (set by each example script: "
                                                      "run_readonce_qa.py reads qa, run_readonce_summarization.py "
                                                      "summarization)"})
    variant: str = field(default="readonce", metadata={"help": "readonce or baseline"})
    model_name_or_path: str = field(default=None, metadata={"help": "BERT (converted) or ReadOnce checkpoint; "
                                                                    "default: the packaged MiniLM"})
    train_file: str = field(default=None, metadata={"help": "JSONL; several files separated by commas"})
    validation_file: str = field(default=None, metadata={"help": "JSONL; several files separated by commas are "
                                                                 "scored separately (eval_<folder name>_...)"})
    compression_ratio: int = field(default=None, metadata={
        "help": "k; default 8 for a model converted from BERT, the checkpoint's for a readonce_bart checkpoint. A k "
                "other than the checkpoint's fine-tunes it at that k (§5.2; the window keeps its overlap w - k)."})
    append_layer: int = field(default=None, metadata={"help": "L: question-only encoder layers before the representations are appended (Fig. 3; default: half the encoder)."})
    max_document_length: int = field(default=None, metadata={
        "help": "document tokens read; default the model's T*k capacity (config.document_chunk_length * k, §5.5): "
                "a document longer than one chunk of T tokens is read in chunks, not cut"})
    bart_learning_rate: float = field(default=None, metadata={
        "help": "learning rate of the weights that come from the pretrained checkpoint (§4.1: 1e-5 from BART); "
                "default: --learning_rate"})
    new_learning_rate: float = field(default=None, metadata={
        "help": "learning rate of the newly initialized weights (the aggregation); default: 10 x the former, the "
                "ratio of §4.1 (1e-4 vs 1e-5)"})
    balance_sources: bool = field(default=True, metadata={
        "help": "with several --train_file files, draw as many training questions from each (the smaller ones "
                "repeated, §3.3) with datasets.interleave_datasets; --no_balance_sources concatenates them"})
    max_question_length: int = field(default=32, metadata={
        "help": "question (or prompt) tokens read, special tokens included; recorded in a readonce checkpoint's "
                "config"})
    max_target_length: int = field(default=32)
    max_train_samples: int = field(default=None)
    max_eval_samples: int = field(default=None)
    stage1_steps: int = field(default=None, metadata={"help": "steps of stage 1 (joint training; the baseline's "
                                                              "only stage); default max_steps; 0 skips it, e.g. "
                                                              "to fine-tune a QA-trained checkpoint downstream"})
    stage2_steps: int = field(default=0, metadata={"help": "steps on stored representations, document encoder "
                                                           "frozen (0: no stage 2)"})
    store_dir: str = field(default=None, metadata={"help": "representation store (default: output_dir/store)"})
    generation_max_tokens: int = field(default=32)
    num_beams: int = field(default=1)
    eval_compression_ratios: str = field(default=None, metadata={"help": "also evaluate at these k (comma list)"})
    train_time_budget_s: float = field(default=None, metadata={
        "help": "stop each training stage once this many seconds have passed (TimeBudgetCallback); the steps "
                "reached are recorded as stage<n>_train_steps"})


def load_rows(task: str, path: str, limit: int | None = None, balance: bool = False, seed: int = 42) -> list[dict]:
    """Rows `{id, question, document, targets}`: QA rows from SQuAD-style JSONL (unanswerable and empty rows set
    aside; several files separated by commas), summarization rows from XSum JSONL (question "summary").

    Args:
        task (`str`): `"qa"` or `"summarization"`.
        path (`str`): one JSONL file, or several separated by commas.
        limit (`int`, *optional*): keep the first `limit` rows (of the balanced mixture with `balance`).
        balance (`bool`, defaults to `False`): with several files, interleave them so that each contributes as many
            rows, the smaller ones repeated until the largest is used up (§3.3: "the same number of questions are
            selected from both the datasets in each batch (by duplicating SQuAD questions)";
            `datasets.interleave_datasets(..., stopping_strategy="all_exhausted")`). Under a shuffling sampler a
            batch then holds the sources in equal proportion in expectation, and exactly over the whole mixture.
        seed (`int`, defaults to 42): unused by the alternating interleave today; kept for a reproducible mixture.

    Rows whose fields are missing, not strings or blank are set aside (summarization needs string `document` and
    `summary`; QA a string `question`, `context` and at least one non-blank answer text); a row without `id` is given
    its position among its file's rows (`"<file path>:<row>"`, blank lines not counted). The result may be empty:
    [`run`] reports an empty file.

    Raises:
        ValueError: an unknown `task`; from [`read_jsonl`], a line that is not a JSON object.
        FileNotFoundError: a file that does not exist.
    """
    if task not in ("qa", "summarization"):
        raise ValueError(f"`task` must be qa or summarization, got {task!r}.")
    files = path.split(",")
    if balance and len(files) > 1:
        from datasets import Dataset, interleave_datasets

        parts = [load_rows(task, file) for file in files]
        empty = [file for file, rows in zip(files, parts) if not rows]
        if empty:
            raise ValueError(f"`train_file` {', '.join(empty)} holds no usable rows; cannot balance the sources.")
        mixture = interleave_datasets([Dataset.from_list(rows) for rows in parts], seed=seed,
                                      stopping_strategy="all_exhausted").to_list()
        return mixture[:limit] if limit else mixture
    rows = []
    for file in files:
        name = str(file)  # the path as given: two sources may share a file name (disfl_qa/train.jsonl, quoref/...)
        if task == "qa":
            for row, e in enumerate(read_jsonl(file), start=1):
                if any(field_problem(e, key) for key in ("question", "context")):
                    continue
                answers = e.get("answers")
                texts = answers.get("text") if isinstance(answers, dict) else None
                texts = [t for t in texts if isinstance(t, str) and t.strip()] if isinstance(texts, list) else []
                if texts:
                    rows.append({"id": str(e.get("id", f"{name}:{row}")), "question": e["question"],
                                 "document": e["context"], "targets": texts})
        else:
            for row, e in enumerate(read_jsonl(file), start=1):
                document, summary = e.get("document"), e.get("summary")
                if isinstance(document, str) and document.strip() and isinstance(summary, str) and summary.strip():
                    rows.append({"id": str(e.get("id", f"{name}:{row}")), "question": "summary",
                                 "document": document, "targets": [summary]})
    return rows[:limit] if limit else rows


_EXPECTED_FIELDS = {"qa": "SQuAD-style `id`, `question`, `context` and `answers` {`text`: [...]} with an answer",
                    "summarization": "XSum-style string `document` and `summary` (and `id`)"}


def check_arguments(args: ReadOnceArguments, training_args: Seq2SeqTrainingArguments) -> None:
    """Check the settings [`run`] reads before it loads a model (the example scripts turn the error into a usage
    message).

    Raises:
        ValueError: an unknown `task` or `variant`; `train_file` missing with `do_train` or `validation_file` with
            `do_eval`; a length, budget or count below 1 (`max_target_length` below 2), naming it.
        TypeError: such a setting that is not an int.
        FileNotFoundError: a `train_file` / `validation_file` path that is not a file, naming the argument.
    """
    if args.task not in ("qa", "summarization"):
        raise ValueError(f"`task` must be qa or summarization, got {args.task!r}.")
    if args.variant not in ("readonce", "baseline"):
        raise ValueError(f"`variant` must be readonce or baseline, got {args.variant!r}.")
    check_positive_ints({"max_document_length": args.max_document_length,
                         "max_question_length": args.max_question_length,
                         "max_target_length": args.max_target_length, "max_train_samples": args.max_train_samples,
                         "max_eval_samples": args.max_eval_samples, "generation_max_tokens": args.generation_max_tokens,
                         "num_beams": args.num_beams, "compression_ratio": args.compression_ratio},
                        optional=("max_document_length", "max_train_samples", "max_eval_samples",
                                  "compression_ratio"))
    if args.max_target_length < 2:
        raise ValueError(f"`max_target_length` must be >= 2 (a token and the end), got {args.max_target_length}.")
    for name, needed, flag in (("train_file", training_args.do_train, "do_train"),
                               ("validation_file", training_args.do_eval, "do_eval")):
        value = getattr(args, name)
        if not needed:
            continue
        if not value:
            raise ValueError(f"`{name}` is needed with {flag}.")
        for file in value.split(","):
            if not os.path.isfile(file):
                raise FileNotFoundError(f"`{name}` {file!r} is not a file.")


class ReadOnceCollator:
    """Pads a batch of rows for the chosen variant: question + document tokens (readonce, stage 1), question +
    stored representations (stage 2), or question + document as one text (baseline)."""

    def __init__(self, tokenizer, args: ReadOnceArguments, store_lookup=None):
        self.tokenizer, self.args, self.store_lookup = tokenizer, args, store_lookup

    def __call__(self, rows):
        args, tok = self.args, self.tokenizer
        questions = [r["question"] for r in rows]
        if args.variant == "baseline":
            batch = tok(questions, [r["document"] for r in rows], truncation="only_second", padding=True,
                        max_length=args.max_question_length + args.max_document_length, return_tensors="pt")
            features = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        else:
            q = tok(questions, truncation=True, max_length=args.max_question_length, padding=True, return_tensors="pt")
            features = {"input_ids": q.input_ids, "attention_mask": q.attention_mask}
            if self.store_lookup is not None:
                features.update(self.store_lookup([r["document"] for r in rows]))
            else:
                d = tok([r["document"] for r in rows], truncation=True, max_length=args.max_document_length,
                        padding=True, return_tensors="pt")
                features.update(document_input_ids=d.input_ids, document_input_attention_mask=d.attention_mask)
        if "targets" in rows[0] and rows[0].get("train", True):
            target = tok([r["targets"][0] for r in rows], add_special_tokens=False, truncation=True,
                         max_length=args.max_target_length - 1)["input_ids"]
            width = max(len(t) for t in target) + 1
            labels = torch.full((len(rows), width), -100)
            for i, t in enumerate(target):
                labels[i, : len(t) + 1] = torch.tensor(t + [tok.sep_token_id])
            features["labels"] = labels
        return features


def store_lookup_fn(store: RepresentationStore, adapter):
    """`texts -> {document_representations, document_attention_mask}` padded from the store (the adapter's read
    side)."""
    fingerprint, settings = adapter.fingerprint(), adapter.settings()

    def lookup(texts):
        reps = adapter.read(store.get_many(fingerprint, settings, [content_hash(t) for t in texts]),
                            dtype=torch.float32)
        return {"document_representations": reps.representations, "document_attention_mask": reps.attention_mask}

    return lookup


class _TimedTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer that records the wall time of each training step's forward and backward (seconds per batch;
    on a GPU the queued work is waited for, so the time is the device's, not the launch time)."""

    def training_step(self, *args, **kwargs):
        synchronize = torch.cuda.synchronize if self.args.device.type == "cuda" else (lambda: None)
        synchronize()
        start = time.perf_counter()
        loss = super().training_step(*args, **kwargs)
        synchronize()
        self.step_times = getattr(self, "step_times", []) + [time.perf_counter() - start]
        return loss


def learning_rates(args: ReadOnceArguments, training_args) -> tuple[float, float]:
    """`(bart_learning_rate, new_learning_rate)` of a run: the arguments, else `training_args.learning_rate` for
    the pretrained weights and 10x that for the new ones (§4.1's 1e-5 / 1e-4).

    Raises:
        ValueError: a learning rate that is not positive (naming it).
    """
    bart = args.bart_learning_rate if args.bart_learning_rate is not None else training_args.learning_rate
    new = args.new_learning_rate if args.new_learning_rate is not None else 10 * bart
    for name, value in (("bart_learning_rate", bart), ("new_learning_rate", new)):
        if not value > 0:
            raise ValueError(f"`{name}` must be positive, got {value!r}.")
    return bart, new


def _train(model, rows, collator, training_args, steps: int, rates: tuple[float, float],
           time_budget_s: float | None = None):
    args = dataclasses.replace(training_args, max_steps=steps, remove_unused_columns=False)
    # The paper's two learning rates (§4.1): the model's own parameter groups, the Trainer's scheduler on top.
    optimizer = torch.optim.AdamW(model.optimizer_parameter_groups(*rates, weight_decay=args.weight_decay),
                                  betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon)
    # rows are plain dicts batched by the collator, so a list is the dataset
    callbacks = [TimeBudgetCallback(time_budget_s)] if time_budget_s else None
    # decoder inputs made from the labels: the loss reads the same, and `label_smoothing_factor` (which takes the
    # labels out of the batch) still trains on the targets
    trainer = _TimedTrainer(model=model, args=args, train_dataset=rows,
                            data_collator=DecoderInputsCollator(collator, model),
                            optimizers=(optimizer, None), callbacks=callbacks)
    result = trainer.train()
    times = sorted(trainer.step_times)
    return trained_model(trainer), {
        "train_loss": round(result.training_loss, 4), "seconds_per_batch": round(times[len(times) // 2], 3),
        "train_seconds": round(result.metrics["train_runtime"], 1), "train_steps": result.global_step}


def _to_device(features: dict, device) -> dict:
    return {key: value.to(device) if torch.is_tensor(value) else value for key, value in features.items()}


@torch.no_grad()
def evaluation_loss(model, tokenizer, rows, args: ReadOnceArguments, store_lookup=None, batch_size: int = 32) -> float:
    """Teacher-forced cross-entropy (nats per target token, `[SEP]` included) of the gold targets: a learning
    signal that does not depend on decoding.

    Raises:
        ValueError: `rows` is empty (no target token to score).
    """
    if not rows:
        raise ValueError("`rows` is empty: no target to score.")
    model.eval()
    collator = ReadOnceCollator(tokenizer, args, store_lookup)
    total, count = 0.0, 0
    for i in range(0, len(rows), batch_size):
        features = _to_device(collator(rows[i : i + batch_size]), model.device)
        n = int((features["labels"] != -100).sum())
        total += float(model(**features).loss) * n
        count += n
    return total / count


@torch.no_grad()
def evaluate(model, tokenizer, rows, args: ReadOnceArguments, store_lookup=None, compression_ratio=None,
             batch_size: int = 32) -> dict:
    """Generate for every row and score (EM/F1 or ROUGE-L). Returns metrics and the seconds spent."""
    model.eval()
    collator = ReadOnceCollator(tokenizer, args, store_lookup)
    predictions, start = [], time.perf_counter()
    for i in range(0, len(rows), batch_size):
        chunk = [{**r, "train": False} for r in rows[i : i + batch_size]]
        features = _to_device(collator(chunk), model.device)
        if "document_input_ids" in features:  # k=None: the model's own compression ratio
            # the representations only: no attention weights or per-layer states, whatever the config asks for
            features["document_representations"] = model.encode_documents(
                features.pop("document_input_ids"), features.pop("document_input_attention_mask"), compression_ratio,
                output_attentions=False, output_hidden_states=False)
        out = model.generate(**features, max_new_tokens=args.generation_max_tokens, num_beams=args.num_beams,
                             do_sample=False)
        predictions += tokenizer.batch_decode(out, skip_special_tokens=True)
    seconds = time.perf_counter() - start
    metrics = score_generations(args.task, predictions, rows)
    metrics["baselines"] = trivial_generation_baselines(args.task, rows)
    return {**metrics, "seconds": round(seconds, 1), "examples": len(rows), "sample_prediction": predictions[0]}


def score_generations(task: str, predictions: list[str], rows: list[dict]) -> dict:
    """SQuAD EM/F1 (task "qa", against every target) or ROUGE-1/2/L F-measure (task "summarization", against the
    first target), in percent, with torchmetrics."""
    from torchmetrics.text import SQuAD

    if task == "qa":
        scores = SQuAD()([{"prediction_text": p, "id": r["id"]} for p, r in zip(predictions, rows)],
                         [{"answers": {"text": r["targets"], "answer_start": [0] * len(r["targets"])}, "id": r["id"]}
                          for r in rows])
        return {"exact_match": round(float(scores["exact_match"]), 2), "f1": round(float(scores["f1"]), 2)}
    return rouge_scores(predictions, [r["targets"][0] for r in rows])


def trivial_generation_baselines(task: str, rows: list[dict]) -> dict:
    """Scores of the trivial baselines on `rows`, to print beside every model score: for QA the document's first
    span (3 words) and first sentence; for summarization lead-1 and lead-3. Same scorer as the model."""
    if task == "qa":
        examples = [{"id": r["id"], "context": r["document"]} for r in rows]
        candidates = {"first_span": first_span_predictions(examples),
                      "first_sentence": first_sentence_predictions(examples)}
        return {name: score_generations(task, [preds[r["id"]] for r in rows], rows)
                for name, preds in candidates.items()}
    return lead_baselines([r["document"] for r in rows], [r["targets"][0] for r in rows])


def run(args: ReadOnceArguments, training_args: Seq2SeqTrainingArguments) -> dict:
    """Train (stage 1, optional stage 2) and evaluate one variant; writes `output_dir/readonce_results.json`.

    Evaluation runs on `model.device` (the Trainer's device after training) in float32, with
    `per_device_eval_batch_size` rows per batch; each validation file is scored separately.

    Raises:
        ValueError / TypeError / FileNotFoundError: as [`check_arguments`]; a `train_file` (with `do_train`) or
            `validation_file` (with `do_eval`) that holds no usable row, naming the argument and the fields expected.
    """
    check_arguments(args, training_args)
    train_rows = (load_rows(args.task, args.train_file, args.max_train_samples, balance=args.balance_sources,
                            seed=training_args.seed) if training_args.do_train else [])
    eval_sets = {}
    if training_args.do_eval:
        files = args.validation_file.split(",")
        folders = [os.path.basename(os.path.dirname(os.path.abspath(file))) for file in files]
        if len(files) == 1:
            names = ["eval"]
        elif len(set(folders)) == len(folders):  # several files: keyed by their folder (the data set's name)
            names = [f"eval_{folder}" for folder in folders]
        else:
            names = [f"eval{index}" for index in range(len(files))]
        eval_sets = {name: load_rows(args.task, file, args.max_eval_samples) for name, file in zip(names, files)}
    usable = "an answerable question" if args.task == "qa" else "a document and a summary"
    if training_args.do_train and not train_rows:
        raise ValueError(f"`train_file` {args.train_file} holds no row with {usable}: expected "
                         f"{_EXPECTED_FIELDS[args.task]} in each JSONL line.")
    for rows, file in zip(eval_sets.values(), args.validation_file.split(",") if eval_sets else []):
        if not rows:
            raise ValueError(f"`validation_file` {file} holds no row with {usable}: expected "
                             f"{_EXPECTED_FIELDS[args.task]} in each JSONL line.")
    path = args.model_name_or_path or str(minilm_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    config_file = os.path.join(path, "config.json")
    saved = json.loads(Path(config_file).read_text(encoding="utf-8-sig")) if os.path.isfile(config_file) else {}
    if saved.get("model_type") == "readonce_bart":
        config = ReadOnceBartConfig.from_pretrained(path)
        if args.compression_ratio is not None and args.compression_ratio != config.compression_ratio:
            # §5.2: the checkpoint fine-tuned at another k; the window keeps its overlap w - k.
            overlap = config.window_size - config.compression_ratio
            config = ReadOnceBartConfig.from_dict({**config.to_dict(), "compression_ratio": args.compression_ratio,
                                                   "window_size": args.compression_ratio + overlap})
        model = ReadOnceBartForConditionalGeneration.from_pretrained(path, config=config)
    else:
        kwargs = {"compression_ratio": 8 if args.compression_ratio is None else args.compression_ratio}
        if args.append_layer is not None:
            kwargs["append_layer"] = args.append_layer
        model = readonce_bart_from_bert(path, seed=training_args.seed, **kwargs)
    model.to(training_args.device)
    if args.max_document_length is None:
        # readonce: the T*k capacity (§5.5), longer documents read in chunks; baseline: what fits BART's positions
        config = model.config
        args = dataclasses.replace(args, max_document_length=(
            config.document_chunk_length * config.compression_ratio if args.variant == "readonce"
            else config.max_position_embeddings - args.max_question_length))
    rates = learning_rates(args, training_args)
    metrics = {"task": args.task, "variant": args.variant, "compression_ratio": model.config.compression_ratio,
               "model": path, "max_document_length": args.max_document_length, "bart_learning_rate": rates[0],
               "new_learning_rate": rates[1]}
    batch = training_args.per_device_eval_batch_size
    if args.variant == "baseline":
        # the baseline reads no document: frozen, the document encoder is left out of the optimizer and of
        # DistributedDataParallel, which (without `find_unused_parameters`, Trainer's choice under gradient
        # checkpointing) stops at a trainable parameter without a gradient
        model.freeze_document_encoder()
    stage1_steps = training_args.max_steps if args.stage1_steps is None else args.stage1_steps
    if training_args.do_train and stage1_steps > 0:
        for name, rows in eval_sets.items():
            metrics[f"{name}_loss_before_training"] = round(evaluation_loss(model, tokenizer, rows, args,
                                                                            batch_size=batch), 4)
        model, stats = _train(model, train_rows, ReadOnceCollator(tokenizer, args), training_args, stage1_steps,
                              rates, args.train_time_budget_s)
        metrics.update({f"stage1_{k}": v for k, v in stats.items()})
    lookup = None
    if args.variant == "readonce" and args.stage2_steps > 0:
        model.freeze_document_encoder()
        model.document_encoder.eval()  # representations are read once, without dropout
        store = RepresentationStore(args.store_dir or os.path.join(training_args.output_dir, "store"))
        adapter = ReadOnceBartAdapter(model, tokenizer, args.max_document_length)
        eval_rows = [row for rows in eval_sets.values() for row in rows]
        documents = list(dict.fromkeys(r["document"] for r in train_rows + eval_rows))
        start = time.perf_counter()
        encoded = fill_store(adapter, store, documents, store_dtype="float16")
        metrics["store_encode_seconds"] = round(time.perf_counter() - start, 1)
        metrics["store_documents"] = encoded.encoded + encoded.already_stored
        lookup = store_lookup_fn(store, adapter)
        if training_args.do_train:
            model, stats = _train(model, train_rows, ReadOnceCollator(tokenizer, args, lookup), training_args,
                                  args.stage2_steps, rates, args.train_time_budget_s)
            metrics.update({f"stage2_{k}": v for k, v in stats.items()})
    model.float()
    for name, rows in eval_sets.items():
        metrics[f"{name}_loss"] = round(evaluation_loss(model, tokenizer, rows, args, lookup, batch_size=batch), 4)
        scores = evaluate(model, tokenizer, rows, args, lookup, batch_size=batch)
        metrics.update({f"{name}_{k}": v for k, v in scores.items()})
        if args.variant == "readonce" and args.eval_compression_ratios:
            for k in (int(x) for x in args.eval_compression_ratios.split(",")):
                scores = evaluate(model, tokenizer, rows, args, None, compression_ratio=k, batch_size=batch)
                metrics[f"{name}_k{k}"] = {key: v for key, v in scores.items() if key != "sample_prediction"}
    os.makedirs(training_args.output_dir, exist_ok=True)
    if args.variant == "readonce":  # the adapter's and `hf-readonce encode`'s default, so stores match training
        model.config.max_document_length = args.max_document_length
        # the question (prompt) tokens read with the representations: the pipelines' and `hf-readonce answer`'s
        model.config.max_question_length = args.max_question_length
    model.save_pretrained(training_args.output_dir)
    tokenizer.save_pretrained(training_args.output_dir)
    with open(os.path.join(training_args.output_dir, "readonce_results.json"), "w") as handle:
        json.dump(metrics, handle, indent=2)
    print(json.dumps(metrics, indent=2))
    return metrics


__all__ = [
    "ReadOnceArguments",
    "ReadOnceCollator",
    "check_arguments",
    "evaluate",
    "evaluation_loss",
    "lead_sentences",
    "learning_rates",
    "load_rows",
    "run",
    "score_generations",
    "trivial_generation_baselines",
]
