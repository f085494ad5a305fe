"""Training and evaluation pipeline of LongDoc BART on summarization, behind
`examples/summarization/run_longdoc_summarization.py`.

The model reads the whole document (up to `max_document_length` tokens) with the chosen encoder self-attention of
Kosaraju, Ang and Nabulsi's report (§2.3: neighborhood, convolutional, convolutional per head, or both), and writes
the summary with BART's decoder.

- Warm start: without `model_name_or_path`, the packaged all-MiniLM-L6-v2 BERT is converted to a BART-shaped model
  (the BERT2BERT mapping of [`hf_readonce.models.longdoc_bart.convert_bert_to_longdoc_bart`]) and loaded into
  [`LongDocBartForConditionalGeneration`] with the chosen attention ([`longdoc_bart_from_bert`]); a `bart` or
  `longdoc_bart` checkpoint loads directly. BART's LayerNorm epsilon (1e-5) replaces BERT's 1e-12 (BartConfig has no
  such field), a negligible change to the warm start.
- Documents longer than the position table: BART's positions are learned, so `max_document_length` tokens need
  `max_document_length` rows. [`extend_position_embeddings`] grows the encoder's and decoder's tables by copying
  the existing rows in order (row `p` of the new table is old row `p mod old_length`), as Longformer extended
  RoBERTa's 512 positions to 4,096 (Beltagy et al. 2020, §5); fine-tuning then adapts them. Neighborhood attention
  sees only `2r + 1` tokens at a time, so within a window the copied positions still differ (r = 100 < 512 = the
  MiniLM table), which is what made copying work for Longformer. The run reports how many positions were added.
- Training: `Seq2SeqTrainer` on the train rows (`max_train_samples`), the training arguments as given (e.g.
  `--gradient_checkpointing`).
- Evaluation on every validation row (unless `max_eval_samples`): ROUGE-1/2/L F-measure (percent, torchmetrics,
  [`hf_readonce.recipes.readonce.score_generations`]) of greedy/beam summaries, perplexity = exp of the
  teacher-forced token cross-entropy of the gold summaries (the paper's second metric, §3.3), and the lead-1 /
  lead-3 baselines ([`trivial_generation_baselines`]) beside them; optionally a heatmap PNG of the first validation
  document's effective attention ([`hf_readonce.recipes.longdoc_attention.effective_attention`]).

Measured with it: the XSum table of the LongDoc page (`benchmarks/results/xsum_table/`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, BertModel, Seq2SeqTrainer, Seq2SeqTrainingArguments
from transformers.models.bart.modeling_bart import BartLearnedPositionalEmbedding

from ..models.longdoc_bart.configuration_longdoc_bart import ENCODER_ATTENTION_TYPES, LongDocBartConfig
from ..models.longdoc_bart.convert_bert_to_longdoc_bart import bart_config_from_bert, bart_state_dict_from_bert
from ..models.longdoc_bart.modeling_longdoc_bart import LongDocBartForConditionalGeneration
from ..tasks.trainers import DecoderInputsCollator, TimeBudgetCallback, trained_model
from ..weights import load_quietly, minilm_path
from .readonce import load_rows, score_generations, trivial_generation_baselines

_LONGDOC_FIELDS = ("encoder_attention_type", "neighborhood_radius", "conv_kernel_size", "conv_stride",
                   "decoder_attention_type")
_DEFAULTS = {"encoder_attention_type": "neighborhood", "neighborhood_radius": 100, "conv_kernel_size": 3,
             "conv_stride": 3, "decoder_attention_type": "full"}


@dataclass
class LongDocSummarizationArguments:
    """Model, data and evaluation arguments of `run_longdoc_summarization.py` (the training ones are
    `Seq2SeqTrainingArguments`). The LongDoc fields left unset take the checkpoint's values (a `longdoc_bart`
    checkpoint) or the paper's defaults (neighborhood, r = 100, kernel 3, stride 3, full decoder)."""

    model_name_or_path: str = field(default=None, metadata={
        "help": "BERT (converted to BART, then LongDoc), bart or longdoc_bart checkpoint; default: the packaged "
                "MiniLM"})
    encoder_attention_type: str = field(default=None, metadata={"help": "|".join(ENCODER_ATTENTION_TYPES)})
    neighborhood_radius: int = field(default=None, metadata={"help": "r (default 100)"})
    conv_kernel_size: int = field(default=None, metadata={"help": "convolution kernel (default 3)"})
    conv_stride: int = field(default=None, metadata={"help": "convolution stride (default 3)"})
    decoder_attention_type: str = field(default=None, metadata={"help": "full or neighborhood (default full)"})
    train_file: str = field(default=None, metadata={"help": "XSum-style JSONL (id, document, summary)"})
    validation_file: str = field(default=None, metadata={"help": "XSum-style JSONL, scored in full by default"})
    max_document_length: int = field(default=1024, metadata={
        "help": "document tokens read; positions beyond the checkpoint's table are added by copying its rows"})
    max_target_length: int = field(default=64, metadata={"help": "summary tokens trained on (end token included)"})
    max_train_samples: int = field(default=None)
    max_eval_samples: int = field(default=None, metadata={"help": "default: every validation row"})
    generation_max_tokens: int = field(default=64)
    num_beams: int = field(default=1)
    train_time_budget_s: float = field(default=None, metadata={
        "help": "stop training after this many seconds (then evaluate as usual; the steps reached are reported as "
                "train_steps)"})
    attention_heatmap_tokens: int = field(default=0, metadata={
        "help": "with do_eval and N > 0: save the effective attention of encoder layer 0 over the first N tokens of "
                "the first validation document as output_dir/attention_<type>.png (0: none)"})


def longdoc_bart_from_bert(bert_name_or_path, seed: int = 0, **longdoc_kwargs) -> LongDocBartForConditionalGeneration:
    r"""A [`LongDocBartForConditionalGeneration`] warm-started from a BERT checkpoint: BERT converted to BART
    (encoder and decoder self-attention/feed-forward from BERT's layers, embeddings and tied LM head from BERT's,
    cross-attention new; [`bart_state_dict_from_bert`]) and loaded into LongDoc BART with the given attention.

    Args:
        bert_name_or_path: a BERT checkpoint folder (e.g. `hf_readonce.weights.minilm_path()`) or a `BertModel`.
        seed (`int`, defaults to 0): seeds the new weights (cross-attention, convolutions).
        **longdoc_kwargs: [`LongDocBartConfig`] fields (`encoder_attention_type`, `neighborhood_radius`, ...).

    Returns:
        the model in train mode, float32, `max_position_embeddings` = BERT's (see [`extend_position_embeddings`]).

    Raises:
        ValueError: an unsupported BERT activation, bad LongDoc settings (from the config), or a conversion that
            produced weights LongDoc BART does not have.
    """
    bert = bert_name_or_path if isinstance(bert_name_or_path, BertModel) else load_quietly(  # BERT's unused pooler
        BertModel.from_pretrained, bert_name_or_path, add_pooling_layer=False)
    config = bart_config_from_bert(bert.config, LongDocBartConfig, **longdoc_kwargs)
    torch.manual_seed(seed)
    model = LongDocBartForConditionalGeneration(config)
    result = model.load_state_dict(bart_state_dict_from_bert(bert, config), strict=False)
    if result.unexpected_keys:
        raise ValueError(f"unexpected keys while converting BERT: {result.unexpected_keys[:5]}")
    new = [key for key in result.missing_keys if ".encoder_attn" not in key and ".conv." not in key
           and key != "final_logits_bias"]
    if new:
        raise ValueError(f"weights left uninitialized by the BERT conversion: {new[:5]}")
    model.tie_weights()
    return model.train()


def extend_position_embeddings(model: LongDocBartForConditionalGeneration, length: int) -> int:
    r"""Grow the learned position tables of the encoder and decoder to `length` positions by copying the existing
    rows in order (new position p takes old position `p mod old_length`; Longformer's recipe, Beltagy et al. 2020
    §5), and set `config.max_position_embeddings = length`. Positions below the old length keep their rows, so a
    document that fitted before is encoded exactly as before. Both tables grow because BART builds both from
    `config.max_position_embeddings` (a saved checkpoint must load). No-op if the tables are already long enough.

    Args:
        model ([`LongDocBartForConditionalGeneration`] or any BART): changed in place.
        length (`int`): positions wanted, >= 1.

    Returns:
        `int`: positions added (0 if none).

    Raises:
        TypeError: `length` not an int. ValueError: `length` < 1.
    """
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"`length` must be an int, got {length!r}.")
    if length < 1:
        raise ValueError(f"`length` must be >= 1, got {length}.")
    old = model.config.max_position_embeddings
    if length <= old:
        return 0
    for side in (model.model.encoder, model.model.decoder):
        table = side.embed_positions
        offset = table.offset
        grown = BartLearnedPositionalEmbedding(length, table.embedding_dim).to(table.weight.device,
                                                                               table.weight.dtype)
        with torch.no_grad():
            rows = torch.arange(length, device=table.weight.device) % old + offset
            grown.weight.copy_(torch.cat([table.weight[:offset], table.weight[rows]]))
        side.embed_positions = grown
    model.config.max_position_embeddings = length
    return length - old


class LongDocSummarizationCollator:
    r"""Rows `{document, targets}` -> `input_ids`, `attention_mask` `(batch, <= max_document_length)` (the tokenizer's
    special tokens, right padding) and `labels` `(batch, <= max_target_length)`: the first target's tokens (no special
    tokens) then `eos_token_id`, padded with -100. Rows with `"train": False` get no labels.

    Args:
        tokenizer: a fast tokenizer. max_document_length, max_target_length (`int`): >= 1 and >= 2.
        eos_token_id (`int`): the token that ends a summary (the model's `config.eos_token_id`).

    Raises:
        ValueError: lengths out of range (naming them).
    """

    def __init__(self, tokenizer, max_document_length: int, max_target_length: int, eos_token_id: int):
        if max_document_length < 1:
            raise ValueError(f"`max_document_length` must be >= 1, got {max_document_length}.")
        if max_target_length < 2:
            raise ValueError(f"`max_target_length` must be >= 2 (a token and the end), got {max_target_length}.")
        self.tokenizer, self.eos_token_id = tokenizer, eos_token_id
        self.max_document_length, self.max_target_length = max_document_length, max_target_length

    def __call__(self, rows: list[dict]) -> dict:
        batch = self.tokenizer([r["document"] for r in rows], truncation=True, max_length=self.max_document_length,
                               padding=True, padding_side="right", return_tensors="pt")
        features = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if rows[0].get("train", True):
            targets = self.tokenizer([r["targets"][0] for r in rows], add_special_tokens=False, truncation=True,
                                     max_length=self.max_target_length - 1)["input_ids"]
            labels = torch.full((len(rows), max(len(t) for t in targets) + 1), -100)
            for i, target in enumerate(targets):
                labels[i, : len(target) + 1] = torch.tensor(target + [self.eos_token_id])
            features["labels"] = labels
        return features


def _to_device(features: dict, device) -> dict:
    return {key: value.to(device) for key, value in features.items()}


@torch.no_grad()
def teacher_forced_loss(model, collator: LongDocSummarizationCollator, rows: list[dict], batch_size: int = 8,
                        progress: bool = False) -> float:
    """Mean cross-entropy (nats per gold summary token, the end token included) of the gold summaries under
    teacher forcing; `math.exp` of it is the perplexity. With `progress`, a tqdm bar on stderr counts the rows
    scored (`desc` "eval loss").

    Raises:
        ValueError: if `rows` is empty.
    """
    if not rows:
        raise ValueError("`rows` is empty: no summary to score.")
    from tqdm.auto import tqdm

    model.eval()
    total, count = 0.0, 0
    with tqdm(total=len(rows), desc="eval loss", unit="row", disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(rows), batch_size):
            features = _to_device(collator(rows[start : start + batch_size]), model.device)
            logits = model(**features).logits
            total += float(nn.functional.cross_entropy(logits.flatten(0, 1).float(), features["labels"].flatten(),
                                                       ignore_index=-100, reduction="sum"))
            count += int((features["labels"] != -100).sum())
            bar.update(len(rows[start : start + batch_size]))
    return total / count


@torch.no_grad()
def generate_summaries(model, tokenizer, collator: LongDocSummarizationCollator, rows: list[dict],
                       max_new_tokens: int = 64, num_beams: int = 1, batch_size: int = 8,
                       progress: bool = False) -> list[str]:
    """One decoded summary per row (greedy or beam search, special tokens removed), in row order. With `progress`, a
    tqdm bar on stderr counts the rows summarized (`desc` "generate")."""
    from tqdm.auto import tqdm

    model.eval()
    predictions = []
    with tqdm(total=len(rows), desc="generate", unit="row", disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(rows), batch_size):
            chunk = [{**r, "train": False} for r in rows[start : start + batch_size]]
            features = _to_device(collator(chunk), model.device)
            out = model.generate(**features, max_new_tokens=max_new_tokens, num_beams=num_beams, do_sample=False)
            predictions += tokenizer.batch_decode(out, skip_special_tokens=True)
            bar.update(len(chunk))
    return predictions


def load_model(args: LongDocSummarizationArguments, seed: int = 0):
    r"""The model and tokenizer of a run: a `longdoc_bart` checkpoint (LongDoc fields given in `args` override its
    own), a `bart` checkpoint (loaded into LongDoc BART with the fields of `args` or the defaults), or a BERT
    checkpoint / the packaged MiniLM converted by [`longdoc_bart_from_bert`]; then the position tables are extended
    to `args.max_document_length` ([`extend_position_embeddings`]).

    Returns:
        `(model, tokenizer, positions_added)`.

    Raises:
        ValueError: bad LongDoc settings (from [`LongDocBartConfig`], naming the field).
    """
    path = args.model_name_or_path or str(minilm_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    given = {name: getattr(args, name) for name in _LONGDOC_FIELDS if getattr(args, name) is not None}
    config_file = os.path.join(path, "config.json")
    model_type = None
    if os.path.isfile(config_file):
        model_type = json.loads(Path(config_file).read_text(encoding="utf-8-sig")).get("model_type")
    if model_type in ("longdoc_bart", "bart"):
        # the fields go through the config's __init__ (from_dict), which validates them
        saved = load_quietly(LongDocBartConfig.from_pretrained, path).to_dict()
        config = LongDocBartConfig.from_dict({**saved, **({} if model_type == "longdoc_bart" else _DEFAULTS), **given})
        model = LongDocBartForConditionalGeneration.from_pretrained(path, config=config)
    else:
        model = longdoc_bart_from_bert(path, seed=seed, **{**_DEFAULTS, **given})
    added = extend_position_embeddings(model, args.max_document_length)
    # the tokenizer's limit follows the table, so a saved run truncates (and warns) at the model's own positions
    tokenizer.model_max_length = model.config.max_position_embeddings
    return model, tokenizer, added


def run(args: LongDocSummarizationArguments, training_args: Seq2SeqTrainingArguments) -> dict:
    """Train (with `do_train`) and evaluate (with `do_eval`) one LongDoc BART; writes the model (its config records
    `max_document_length`, the default length of the pipeline and the store adapter), the tokenizer and
    `output_dir/longdoc_results.json`, prints the metrics with lead-1 and lead-3 beside them, and returns them.

    Metrics: `eval_rouge1/2/L` (F-measure, percent), `eval_loss` (nats per summary token) and `eval_perplexity`
    (its exp), before training too (`eval_*_before_training`, loss and perplexity only), `eval_baselines` (lead-1,
    lead-3), `train_loss`, `train_seconds`, `train_document_tokens_per_second` (document tokens read per second of
    training, padding excluded), `eval_seconds`.

    Raises:
        ValueError: `do_train` without `train_file`, `do_eval` without `validation_file`, an empty file, bad LongDoc
            settings.
    """
    if training_args.do_train and not args.train_file:
        raise ValueError("`train_file` is needed with do_train.")
    if training_args.do_eval and not args.validation_file:
        raise ValueError("`validation_file` is needed with do_eval.")
    model, tokenizer, added = load_model(args, seed=training_args.seed)
    model.to(training_args.device)
    config = model.config
    collator = LongDocSummarizationCollator(tokenizer, args.max_document_length, args.max_target_length,
                                            config.eos_token_id)
    metrics = {"model": args.model_name_or_path or "minilm (converted)",
               **{name: getattr(config, name) for name in _LONGDOC_FIELDS},
               "max_document_length": args.max_document_length, "positions_added_by_copying": added}
    train_rows = load_rows("summarization", args.train_file, args.max_train_samples) if training_args.do_train else []
    eval_rows = (load_rows("summarization", args.validation_file, args.max_eval_samples)
                 if training_args.do_eval else [])
    for name, rows in (("train_file", train_rows), ("validation_file", eval_rows)):
        if (name == "train_file" and training_args.do_train or name == "validation_file" and training_args.do_eval) \
                and not rows:
            raise ValueError(f"`{name}` holds no row with a document and a summary.")
    batch = training_args.per_device_eval_batch_size
    progress = not training_args.disable_tqdm  # Trainer's own bars follow the same setting
    if training_args.do_train:
        if eval_rows:
            loss = teacher_forced_loss(model, collator, eval_rows, batch, progress=progress)
            metrics.update(eval_loss_before_training=round(loss, 4),
                           eval_perplexity_before_training=round(math.exp(loss), 2))
        trainer_args = dataclasses.replace(training_args, remove_unused_columns=False)
        callbacks = [TimeBudgetCallback(args.train_time_budget_s)] if args.train_time_budget_s else None
        # decoder inputs made from the labels: the loss reads the same, and `label_smoothing_factor` (which takes
        # the labels out of the batch) still trains on the targets
        trainer = Seq2SeqTrainer(model=model, args=trainer_args, train_dataset=train_rows,
                                 data_collator=DecoderInputsCollator(collator, model),
                                 callbacks=callbacks)
        start = time.perf_counter()
        result = trainer.train()
        seconds = time.perf_counter() - start
        model = trained_model(trainer)
        steps = trainer.state.global_step
        per_step = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps
        read = sum(min(len(tokenizer(train_rows[i % len(train_rows)]["document"])["input_ids"]),
                       args.max_document_length) for i in range(steps * per_step))
        metrics.update(train_loss=round(result.training_loss, 4), train_steps=steps, train_seconds=round(seconds, 1),
                       train_document_tokens_per_second=round(read / seconds, 1))
    if training_args.do_eval:
        model.float()
        loss = teacher_forced_loss(model, collator, eval_rows, batch, progress=progress)
        start = time.perf_counter()
        predictions = generate_summaries(model, tokenizer, collator, eval_rows, args.generation_max_tokens,
                                         args.num_beams, batch, progress=progress)
        scores = score_generations("summarization", predictions, eval_rows)
        metrics.update(eval_seconds=round(time.perf_counter() - start, 1), eval_examples=len(eval_rows),
                       eval_loss=round(loss, 4), eval_perplexity=round(math.exp(loss), 2),
                       **{f"eval_{k}": v for k, v in scores.items()},
                       eval_baselines=trivial_generation_baselines("summarization", eval_rows),
                       eval_sample_prediction=predictions[0])
        if args.attention_heatmap_tokens > 0:
            from .longdoc_attention import effective_attention, save_attention_heatmap

            ids = tokenizer(eval_rows[0]["document"], truncation=True, max_length=args.attention_heatmap_tokens,
                            return_tensors="pt").input_ids.to(model.device)
            path = os.path.join(training_args.output_dir, f"attention_{config.encoder_attention_type}.png")
            os.makedirs(training_args.output_dir, exist_ok=True)
            save_attention_heatmap(effective_attention(model, ids), path,
                                   title=f"{config.encoder_attention_type}, layer 0, {eval_rows[0]['id']}")
            metrics["attention_heatmap"] = path
    os.makedirs(training_args.output_dir, exist_ok=True)
    # the pipeline's, the adapter's and `hf-readonce encode` / `summarize`'s default, so they read as training did
    model.config.max_document_length = args.max_document_length
    model.save_pretrained(training_args.output_dir)
    tokenizer.save_pretrained(training_args.output_dir)
    with open(os.path.join(training_args.output_dir, "longdoc_results.json"), "w") as handle:
        json.dump(metrics, handle, indent=2)
    print(json.dumps(metrics, indent=2))
    if training_args.do_eval:
        print(format_table(metrics))
    return metrics


def format_table(metrics: dict) -> str:
    """The evaluation as a plain-text table: the model's ROUGE-1/2/L and perplexity, with lead-1 and lead-3 (no
    perplexity: they are not models) beneath.

    Raises:
        KeyError: if `metrics` holds no evaluation (`eval_rouge1` ...).
    """
    lines = [f"{'':28s} {'ROUGE-1':>8s} {'ROUGE-2':>8s} {'ROUGE-L':>8s} {'ppl':>8s}"]
    name = f"LongDoc BART ({metrics['encoder_attention_type']})"
    lines.append(f"{name:28s} {metrics['eval_rouge1']:8.2f} {metrics['eval_rouge2']:8.2f} "
                 f"{metrics['eval_rougeL']:8.2f} {metrics['eval_perplexity']:8.2f}")
    for baseline, scores in metrics["eval_baselines"].items():
        lines.append(f"{baseline.replace('_', '-'):28s} {scores['rouge1']:8.2f} {scores['rouge2']:8.2f} "
                     f"{scores['rougeL']:8.2f} {'-':>8s}")
    return "\n".join(lines)


__all__ = [
    "LongDocSummarizationArguments",
    "LongDocSummarizationCollator",
    "extend_position_embeddings",
    "format_table",
    "generate_summaries",
    "load_model",
    "longdoc_bart_from_bert",
    "run",
    "teacher_forced_loss",
]
