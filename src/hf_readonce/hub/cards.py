"""Model cards built from a run's own metrics file with huggingface_hub's `ModelCard` / `ModelCardData`: the
metadata (`library_name`, `pipeline_tag`, tags, `base_model`, `datasets`, `metrics`, a `model-index` with the
measured eval results, `widget` examples in the pipeline's input format) and a body with usage, the method, the
training budget, the measured figures with the trivial baselines beside them, and the limits. No figure is typed by
hand: every number comes from the metrics passed in.

`evaluate` is not used: `evaluate.load(...)` fetches its metric scripts from the Hub, which this package must not
need; the scores are hf-readonce's own (torchmetrics' SQuAD, as in training) and are read from the metrics files.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..timing import busy_machine_reasons


def _cards() -> dict:
    """Model type -> [`~hf_readonce.representations.CardText`] of every registered family (the method text of each
    card: tag, title, paper, paragraphs, pipeline tag and usage snippet are declared with the family)."""
    from ..representations import registered_cards

    return registered_cards()


def __getattr__(name):
    # `METHODS` (model type -> tag, title, paper, paragraphs) and `PIPELINE_TAGS` (model type -> pipeline tag), read
    # from the family registry when asked
    if name == "METHODS":
        return {model_type: {"tag": card.tag, "title": card.title, "paper": card.paper,
                             "paragraphs": card.paragraphs} for model_type, card in _cards().items()}
    if name == "PIPELINE_TAGS":
        return {model_type: card.pipeline_tag for model_type, card in _cards().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DEFAULT_WIDGETS = {
    "question-answering": [{"text": "Who wrote Emma?",
                            "context": "Emma is a novel by Jane Austen, published in December 1815."}],
    "text2text-generation": [{"text": "Who wrote Emma?"}],
    "summarization": [{"text": "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy "
                               "disposition, seemed to unite some of the best blessings of existence."}],
    "text-generation": [{"text": "It is a truth universally acknowledged, that a single man"}],
}

def card_widget(card_text, pipeline_tag: str) -> list:
    """The inference examples a family's card declares: its `CardText.widget`, else `DEFAULT_WIDGETS[pipeline_tag]`
    (none when the family sets `widget=None`: its pipeline needs more than the task's inputs).

    Args:
        card_text ([`CardText`]): the family's card text for one model type.
        pipeline_tag (`str`): the card's pipeline tag (e.g. `"question-answering"`).

    Returns:
        `list[dict]`: the examples, in the pipeline's input format (`text`, and `context` for question answering).
    """
    declared = getattr(card_text, "widget", ())
    if declared is None:
        return []
    return list(declared or DEFAULT_WIDGETS.get(pipeline_tag, []))


BASELINE_NAMES = {"always_empty": "always-empty", "first_span": "first span (3 words)",
                  "first_mention": "first capitalised mention",
                  "first_sentence": "first sentence", "lead_1": "lead-1", "lead_3": "lead-3"}


@dataclass
class EvalRow:
    """One measured result: one metric of the model on one dataset split, with the trivial baselines' values of the
    same metric on the same questions.

    Attributes:
        dataset_type (`str`): dataset id (e.g. `"quoref"`); dataset_name (`str`): shown name.
        split (`str`): e.g. `"validation"`. metric_type (`str`): e.g. `"f1"`. metric_name (`str`): shown name.
        value (`float`): the model's value. task_type (`str`, defaults to `"question-answering"`).
        baselines (`dict[str, float]`): baseline name -> value (shown beside the model, not in the model-index).
        examples (`int`, *optional*): how many examples of the split were scored (shown beside the split, e.g.
            `XSum, validation (4 documents)`: a run limited with `--max_eval_samples` scores only part of it).
    """

    dataset_type: str
    dataset_name: str
    split: str
    metric_type: str
    metric_name: str
    value: float
    task_type: str = "question-answering"
    baselines: dict = field(default_factory=dict)
    examples: int | None = None


_QA_METRICS = (("exact_match", "exact_match", "EM"), ("f1", "f1", "F1"), ("HasAns_f1", "f1", "HasAns F1"),
               ("NoAns_exact", "exact_match", "NoAns EM"))
_SUMMARIZATION_METRICS = (("rouge1", "rouge1", "ROUGE-1"), ("rouge2", "rouge2", "ROUGE-2"),
                          ("rougeL", "rougeL", "ROUGE-L"))


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


# the scores a card reads from a run's metrics file, each under one of the prefixes its runs record them with
# (`eval_` for a Trainer evaluation, `cached_` for `hf-readonce demo`'s answers from cached states)
CARD_SCORES = ("f1", "exact_match", "rouge1", "rouge2", "rougeL")
CARD_SCORE_PREFIXES = ("eval_", "cached_")


def has_card_scores(metrics: Mapping) -> bool:
    """Whether a run's metrics (`metrics`, a metrics file read) hold a score [`card_from_metrics_file`] puts on a
    card: one of `CARD_SCORES` under one of `CARD_SCORE_PREFIXES`, as a finite number (a bool is not one)."""
    return any(_number(metrics.get(prefix + key)) is not None
               for prefix in CARD_SCORE_PREFIXES for key in CARD_SCORES)


def _examples_scored(scores: Mapping, prefix: str) -> int | None:
    """How many examples an evaluation scored, as hf-readonce's runs record it: `{prefix}examples` (the LongDoc and
    ReadOnce recipes, per validation file), `{prefix}questions`, else the run's `eval_examples` / `eval_questions`
    (`run_deformer_qa.py` and the demo record `eval_questions` beside `cached_` scores) / `eval_samples`
    (transformers' Trainer). `None` when none is recorded."""
    for key in (f"{prefix}examples", f"{prefix}questions", "eval_examples", "eval_questions", "eval_samples"):
        value = _number(scores.get(key))
        if value is not None and value >= 1 and value == int(value):
            return int(value)
    return None


def _baselines_beside(baselines: Mapping | None, key: str) -> dict[str, float]:
    """Shown baseline name -> its value of metric `key`, for the baselines that recorded one (`baselines`:
    `{"first_span": {"f1": ...}, "lead_3": {"rouge1": ...}, ...}`)."""
    return {BASELINE_NAMES.get(name, name): _number(b.get(key)) for name, b in (baselines or {}).items()
            if isinstance(b, Mapping) and _number(b.get(key)) is not None}


def qa_rows_from_metrics(scores: Mapping, dataset_type: str, dataset_name: str, *, prefix: str = "eval_",
                         split: str = "validation", baselines: Mapping | None = None,
                         task_type: str = "question-answering") -> list[EvalRow]:
    """EvalRows of one QA evaluation as hf-readonce's runs record it: `{prefix}exact_match`, `{prefix}f1` and,
    where present, `{prefix}HasAns_f1` and `{prefix}NoAns_exact` (when the set has unanswerable questions), with
    `baselines` (`{"first_span": {"f1": ...}, ...}`, the same keys without prefix) beside each.

    Raises:
        TypeError: if `scores` is not a mapping.
        ValueError: if `scores` has neither `{prefix}exact_match` nor `{prefix}f1` (naming the prefix).
    """
    if not isinstance(scores, Mapping):
        raise TypeError(f"`scores` must be a mapping, got {type(scores).__name__}.")
    if _number(scores.get(f"{prefix}exact_match")) is None and _number(scores.get(f"{prefix}f1")) is None:
        raise ValueError(f"`scores` has no {prefix}exact_match or {prefix}f1 (keys: {sorted(scores)[:12]}...).")
    rows = []
    for key, metric_type, shown in _QA_METRICS:
        value = _number(scores.get(prefix + key))
        if value is None or (key.startswith("NoAns") and not scores.get(f"{prefix}NoAns_total")):
            continue
        if key.startswith("HasAns") and not scores.get(f"{prefix}NoAns_total"):
            continue  # every question answerable: HasAns F1 is the F1
        beside = _baselines_beside(baselines, key)
        rows.append(EvalRow(dataset_type, dataset_name, split, metric_type, shown, value, task_type, beside))
    return rows


def summarization_rows_from_metrics(scores: Mapping, dataset_type: str, dataset_name: str, *,
                                    prefix: str = "eval_", split: str = "validation",
                                    baselines: Mapping | None = None) -> list[EvalRow]:
    """EvalRows of one summarization evaluation as hf-readonce's runs record it (`run_longdoc_summarization.py`,
    `run_readonce_summarization.py`): `{prefix}rouge1`, `{prefix}rouge2`, `{prefix}rougeL` (F-measure x 100), with
    `baselines` (`{"lead_3": {"rouge1": ...}, ...}`) beside each, and `{prefix}perplexity` (teacher-forced, of the
    gold summaries) where recorded. A ROUGE score is never shown without lead-3 beside it.

    Raises:
        TypeError: if `scores` is not a mapping.
        ValueError: if `scores` has none of the three ROUGE scores (naming the prefix), or a ROUGE score has no lead-3
            score of the same metric in `baselines` (naming the metrics).
    """
    if not isinstance(scores, Mapping):
        raise TypeError(f"`scores` must be a mapping, got {type(scores).__name__}.")
    rows, alone = [], []
    for key, metric_type, shown in _SUMMARIZATION_METRICS:
        value = _number(scores.get(prefix + key))
        if value is None:
            continue
        beside = _baselines_beside(baselines, key)
        rows.append(EvalRow(dataset_type, dataset_name, split, metric_type, shown, value, "summarization", beside))
        if BASELINE_NAMES["lead_3"] not in beside:
            alone.append(prefix + key)
    if not rows:
        raise ValueError(f"`scores` has no {prefix}rouge1, {prefix}rouge2 or {prefix}rougeL (keys: "
                         f"{sorted(scores)[:12]}...).")
    if alone:
        raise ValueError(f"no lead-3 score beside {', '.join(alone)}: a ROUGE score means nothing without its "
                         f"baseline; record lead-3 on the same documents under `baselines` or `{prefix}baselines` "
                         "(`{\"lead_3\": {\"rouge1\": ..., \"rouge2\": ..., \"rougeL\": ...}}`, as hf-readonce's "
                         "summarization recipes do).")
    perplexity = _number(scores.get(prefix + "perplexity"))
    if perplexity is not None:  # of the gold summaries, teacher-forced; no trivial baseline has one
        rows.append(EvalRow(dataset_type, dataset_name, split, "perplexity", "perplexity (gold summaries)",
                            perplexity, "summarization", {}))
    return rows


def _fmt(value: float) -> str:
    return f"{value:.2f}"


def _flop_ratio(value) -> str:
    """` (FLOP ratio 1.93x)` for a recorded ratio, else nothing: a speed-up is shown beside its FLOP ratio."""
    return f" (FLOP ratio {_fmt(value)}x)" if _number(value) is not None else ""


def _speed_range(metrics: Mapping, name: str, rounds: int | None) -> str:
    """` (range 1.70-1.95x)` for a speed-up timed in several rounds whose `speedup_{name}_range` (`[min, max]` of the
    rounds' ratios, as `hf-readonce demo` records it) is recorded, else nothing."""
    spread = metrics.get(f"speedup_{name}_range")
    if not rounds or not isinstance(spread, (list, tuple)) or len(spread) != 2 \
            or any(_number(value) is None for value in spread):
        return ""
    return f" (range {_fmt(spread[0])}-{_fmt(spread[1])}x)"


_EXAMPLE_UNITS = {"summarization": ("document", "documents"), "question-answering": ("question", "questions")}


def _examples_note(row: EvalRow) -> str:
    """` (4 documents)` beside the split when the row records how many examples were scored, else nothing."""
    if not row.examples:
        return ""
    one, many = _EXAMPLE_UNITS.get(row.task_type, ("example", "examples"))
    return f" ({row.examples:,} {one if row.examples == 1 else many})"


def _results_table(rows: Sequence[EvalRow]) -> str:
    names = []
    for row in rows:
        for name in row.baselines:
            if name not in names:
                names.append(name)
    header = "| dataset, split | metric | this model | " + " | ".join(f"*baseline: {n}*" for n in names) + " |"
    lines = [header.replace(" |  |", " |"), "|" + "---|" * (3 + len(names))]
    for row in rows:
        cells = [f"{row.dataset_name}, {row.split}" + _examples_note(row), row.metric_name, f"**{_fmt(row.value)}**"]
        cells += [_fmt(row.baselines[n]) if n in row.baselines else "" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_model_card(*, repo_id: str, model_type: str, title: str, summary: str, eval_rows: Sequence[EvalRow] = (),
                     base_model: str | None = None, datasets: Sequence[str] = (), pipeline_tag: str | None = None,
                     tags: Sequence[str] = (), custom_code: bool = True, license: str = "apache-2.0",
                     widget: Sequence[Mapping] | None = None, training: Mapping | None = None,
                     figures: Sequence[str] = (), comparison: str | None = None, limitations: Sequence[str] = (),
                     representations_repo: str | None = None, representation_format: Mapping | None = None,
                     warning: str | None = None):
    """A `huggingface_hub.ModelCard` for an hf-readonce checkpoint.

    Args:
        repo_id (`str`): `owner/name` (used in the usage snippets and as the model-index name).
        model_type (`str`): the checkpoint's `config.model_type`, one a registered family describes (`METHODS`):
            picks the method text, the usage snippet, the default `pipeline_tag` and the method tag.
        title (`str`): the card's heading. summary (`str`): its first paragraph.
        eval_rows (`Sequence[EvalRow]`): measured results (model-index and the results table, baselines beside).
        base_model (`str`, *optional*), datasets (`Sequence[str]`): Hub ids.
        pipeline_tag (`str`, *optional*): defaults to the family's (`PIPELINE_TAGS`).
        tags (`Sequence[str]`): extra tags; `hf-readonce`, the method tag and (with `custom_code`) `custom_code` are
            always added.
        widget (`Sequence[Mapping]`, *optional*): inference examples in the pipeline's input format (defaults to
            [`card_widget`]: the family's `CardText.widget`, else `DEFAULT_WIDGETS[pipeline_tag]`, else none).
        training (`Mapping`, *optional*): `command`, `data`, `budget`, `hardware`, `seconds` (each optional).
        figures (`Sequence[str]`): further measured figures, one Markdown bullet each (e.g. speed-ups).
        comparison (`str`, *optional*): a Markdown block (e.g. a table of sibling runs) placed after the results.
        limitations (`Sequence[str]`): one bullet each. warning (`str`, *optional*): a quoted warning under the title.
        representations_repo (`str`, *optional*): dataset repo id of the exported representations (linked).
        representation_format (`Mapping`, *optional*): the checkpoint's `representation_format.json` (summarized).

    Returns:
        `huggingface_hub.ModelCard` (`card.save(path)` writes `README.md`).

    Raises:
        ValueError: an unknown `model_type`, a `repo_id` that is not `owner/name`, or an empty `title`.
    """
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    cards = _cards()
    if model_type not in cards:
        raise ValueError(f"`model_type` must be one of {sorted(cards)}, got {model_type!r}.")
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"`repo_id` must be 'owner/name', got {repo_id!r}.")
    if not isinstance(title, str) or not title.strip():
        raise ValueError("`title` must be a non-empty str.")
    method = cards[model_type]
    pipeline_tag = pipeline_tag or method.pipeline_tag
    all_tags = ["hf-readonce", method.tag] + (["custom_code"] if custom_code else [])
    all_tags += [t for t in tags if t not in all_tags]
    eval_results = [
        EvalResult(task_type=row.task_type, dataset_type=row.dataset_type, dataset_name=row.dataset_name,
                   dataset_split=row.split, metric_type=row.metric_type, metric_name=row.metric_name,
                   metric_value=row.value)
        for row in eval_rows
    ]
    metrics = []
    for row in eval_rows:
        if row.metric_type not in metrics:
            metrics.append(row.metric_type)
    data = ModelCardData(
        library_name="transformers", license=license, base_model=base_model, pipeline_tag=pipeline_tag,
        tags=all_tags, datasets=list(datasets) or None, metrics=metrics or None,
        model_name=repo_id.split("/")[1] if eval_results else None, eval_results=eval_results or None,
        widget=[dict(w) for w in (widget if widget is not None else card_widget(method, pipeline_tag))] or None,
    )
    body = [f"# {title.strip()}", ""]
    if warning:
        body += ["> " + line for line in warning.strip().splitlines()] + [""]
    body += [summary.strip(), "", "## Use", ""]
    if custom_code:
        body += ["The model's code travels with the checkpoint: it loads with plain transformers and "
                 "`trust_remote_code=True`, hf-readonce is not needed.", ""]
    body += [method.render_usage(repo_id, custom_code), ""]
    body += [f"## Method: {method.title}", "", f"Paper: {method.paper}.", ""]
    for paragraph in method.paragraphs:
        body += [paragraph, ""]
    if training:
        body += ["## Training", ""]
        for key, label in (("data", "Data"), ("budget", "Budget"), ("hardware", "Hardware"),
                           ("seconds", "Wall time"), ("command", "Command")):
            value = training.get(key)
            if value is None:
                continue
            if key == "seconds":
                value = f"{float(value):,.0f} s"
            elif key == "command":
                value = f"`{value}`"
            body.append(f"- {label}: {value}")
        body.append("")
    body += ["## Evaluation", ""]
    if eval_rows and all(row.task_type == "summarization" for row in eval_rows):
        body += ["Measured by the run's own evaluation (ROUGE F-measure from torchmetrics, perplexity as the exp of "
                 "the teacher-forced cross-entropy per summary token); lead-1 and lead-3 are scored on the same "
                 "documents by the same scorer.", "", _results_table(eval_rows), ""]
    elif eval_rows and all(row.metric_type == "perplexity" for row in eval_rows):
        body += ["Measured by the run's own evaluation (`hf_readonce.tasks.perplexity.evaluate_perplexity`: the text "
                 "is read in the model's windows, perplexity is the exp of the mean cross-entropy per predicted "
                 "token); the baselines are scored on the same tokens by the same code.", "", _results_table(eval_rows), ""]
    elif eval_rows:
        body += ["Measured by the run's own evaluation (SQuAD EM/F1 from torchmetrics); the trivial baselines are "
                 "scored on the same questions by the same scorer.", "", _results_table(eval_rows), ""]
    else:
        body += ["No evaluation was recorded for this checkpoint.", ""]
    if comparison:
        body += [comparison.strip(), ""]
    if figures:
        body += [f"- {line}" for line in figures] + [""]
    if representation_format or representations_repo:
        body += ["## Stored representations", ""]
        if representation_format:
            settings = {k: v for k, v in representation_format.get("settings", {}).items() if k != "tokenizer"}
            body += [f"`representation_format.json` declares what a stored representation of this model is: "
                     f"`{representation_format.get('representation', representation_format.get('model_type'))}`, "
                     f"settings `{json.dumps(settings, sort_keys=True)}`, dtype `{representation_format.get('dtype')}`,"
                     f" store format version {representation_format.get('store_format_version')}. "
                     "`hf_readonce.store.format_check.check_store_format(store, fmt)` checks a store against it.", ""]
        if representations_repo:
            body += [f"Precomputed representations: [{representations_repo}]"
                     f"(https://huggingface.co/datasets/{representations_repo}) (import with "
                     "`hf_readonce.store.import_from_dataset`).", ""]
    if limitations:
        body += ["## Limitations", ""] + [f"- {line}" for line in limitations] + [""]
    content = f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body).rstrip() + "\n"
    return ModelCard(content)


_STAGES = {1: "stage 1 (document encoder and model trained jointly)",
           2: "stage 2 (on stored representations, document encoder frozen)"}


def _steps(value) -> str:
    steps = _number(value)
    return "" if steps is None else f"{int(steps):,} step{'' if steps == 1 else 's'}"


def _recorded_training(metrics: Mapping) -> dict:
    """`seconds` and `budget` of the card's Training section from what a run recorded: `train_seconds` and
    `train_steps`, or the ReadOnce recipe's per-stage `stage<n>_train_seconds` / `stage<n>_train_steps` (the budget
    lists each stage's steps and seconds, the seconds are their sum)."""
    training = {}
    if _number(metrics.get("train_seconds")) is not None:
        training["seconds"] = metrics["train_seconds"]
        if _steps(metrics.get("train_steps")):
            training["budget"] = _steps(metrics["train_steps"])
        return training
    stages = {n: _number(metrics.get(f"stage{n}_train_seconds")) for n in _STAGES}
    stages = {n: seconds for n, seconds in stages.items() if seconds is not None}
    if stages:
        training["seconds"] = sum(stages.values())
        training["budget"] = "; ".join(
            f"{_STAGES[n]}: " + ", ".join(part for part in (_steps(metrics.get(f"stage{n}_train_steps")),
                                                            f"{seconds:,.0f} s") if part)
            for n, seconds in stages.items())
    return training


def card_from_metrics_file(path: str | os.PathLike, *, dataset_type: str | None, dataset_name: str | None = None,
                           prefix: str | None = None, **card_kwargs):
    """A model card whose results come from one hf-readonce metrics file: question answering (`eval_results.json` of
    `run_deformer_qa.py` / `hf-readonce demo`, the results of `run_readonce_qa.py`: `{prefix}exact_match`,
    `{prefix}f1`, HasAns/NoAns) or summarization (`{prefix}rouge1`, `{prefix}rouge2`, `{prefix}rougeL` of
    `run_longdoc_summarization.py` / `run_readonce_summarization.py`), the trivial baselines (`baselines` or
    `{prefix}baselines`) beside each figure, the number of examples scored beside the split (`{prefix}examples`,
    `eval_questions`, ...: a run limited with `--max_eval_samples` is not shown as the whole split), and, where
    recorded, `speedup_precomputed` / `speedup_including_encoding` (with the range of their interleaved rounds,
    `speedup_*_range` over `speed_rounds`, where recorded; a line calling them unreliable when the run timed them on a
    busy machine, by `hf-readonce demo`'s rule) and the training budget: `train_seconds` (and
    `train_steps`), or the ReadOnce recipe's stages (`stage1_train_seconds` / `stage2_train_seconds` and their
    `_train_steps`: the budget lists each stage, the wall time is their sum). A `training` argument's entries win.

    Args:
        path: the metrics JSON file.
        dataset_type (`str`): Hub id of the evaluation set it scored (the model-index names it); required.
        dataset_name (`str`, *optional*): its shown name (defaults to `dataset_type`).
        prefix (`str`, *optional*): the metric key prefix; by default `"eval_"` if the file has `eval_`-prefixed
            scores, else `"cached_"` (what `hf-readonce demo` records for answers from cached states).
        **card_kwargs: passed to [`build_model_card`] (`repo_id`, `model_type`, `title`, `summary` are required).

    Raises:
        FileNotFoundError: a missing file. ValueError: a directory, unreadable JSON, JSON that is not an object, no
            scores under `prefix`, no `dataset_type` (a placeholder would put a data set that does not exist on the
            card), or a ROUGE score without lead-3 beside it ([`summarization_rows_from_metrics`]).
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"metrics file {path} is a directory; pass the metrics JSON file itself.")
    if not path.is_file():
        raise FileNotFoundError(f"metrics file {path} does not exist.")
    try:
        metrics = json.loads(path.read_text(encoding="utf-8-sig"))  # UTF-8, a byte order mark tolerated
    except (ValueError, OSError) as error:
        raise ValueError(f"{path} is not a readable JSON file: {error}") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics file {path} holds a JSON {type(metrics).__name__}, not an object of metrics (e.g. "
                         "the `eval_results.json` of a training run: {\"eval_exact_match\": ..., \"eval_f1\": ...}).")
    if prefix is None:
        prefix = next((p for p in CARD_SCORE_PREFIXES if any(f"{p}{key}" in metrics for key in CARD_SCORES)), "eval_")
    if not isinstance(dataset_type, str) or not dataset_type.strip():
        raise ValueError(f"a metrics file ({path}) needs `dataset_type` (`--dataset-type`): the Hub id of the set it "
                         "scored (e.g. `quoref`, `EdinburghNLP/xsum`), which the card's model-index names.")
    dataset_name = dataset_name or dataset_type
    baselines = metrics.get("baselines") or metrics.get(f"{prefix}baselines")
    if any(_number(metrics.get(prefix + key)) is not None for key in ("f1", "exact_match")):
        rows = qa_rows_from_metrics(metrics, dataset_type, dataset_name, prefix=prefix, baselines=baselines)
    elif any(_number(metrics.get(prefix + key)) is not None for key, _, _ in _SUMMARIZATION_METRICS):
        try:
            rows = summarization_rows_from_metrics(metrics, dataset_type, dataset_name, prefix=prefix,
                                                   baselines=baselines)
        except ValueError as error:  # a ROUGE score without lead-3 beside it
            raise ValueError(f"metrics file {path}: {error}") from None
        from ..representations import family_of

        model_type = card_kwargs.get("model_type")
        try:
            summarizes = "summarization" in family_of(model_type).pipelines
        except ValueError:  # build_model_card names an unknown model type
            summarizes = False
        if summarizes and card_kwargs.get("pipeline_tag") is None:
            card_kwargs["pipeline_tag"] = "summarization"  # a summarization run, whatever the family's first task
    else:
        raise ValueError(f"metrics file {path} holds no numeric scores under {prefix!r}: neither "
                         f"{prefix}exact_match / {prefix}f1 (question answering) nor {prefix}rouge1 / rouge2 / rougeL "
                         "(summarization) as numbers; "
                         f"its keys: {sorted(metrics)[:12]}.")
    examples = _examples_scored(metrics, prefix)
    for row in rows:
        row.examples = examples
    figures = list(card_kwargs.pop("figures", ()))
    if _number(metrics.get("speedup_precomputed")) is not None:
        rounds = metrics.get("speed_rounds")
        rounds = rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 1 else None
        figures.append(f"Speed-up over the same model reading every question+passage pair, timed on "
                       f"{metrics.get('speed_questions', 'the timed')} questions"
                       + (f" (median of {rounds} interleaved rounds)" if rounds else "") + ": "
                       f"{_fmt(metrics['speedup_precomputed'])}x" + _speed_range(metrics, "precomputed", rounds)
                       + " with passage states precomputed" + _flop_ratio(metrics.get("flop_ratio_precomputed"))
                       + (f", {_fmt(metrics['speedup_including_encoding'])}x"
                          + _speed_range(metrics, "including_encoding", rounds) + " including encoding them"
                          + _flop_ratio(metrics.get("flop_ratio_including_encoding"))
                          if _number(metrics.get("speedup_including_encoding")) is not None else "") + ".")
        busy = busy_machine_reasons(metrics)
        if busy:  # the run said so when it printed them; the card says it too
            figures.append(f"These speed-ups were timed on a busy machine ({'; '.join(busy)}): they are unreliable.")
    training = dict(card_kwargs.pop("training", None) or {})
    for key, value in _recorded_training(metrics).items():
        training.setdefault(key, value)
    return build_model_card(eval_rows=rows, figures=figures, training=training or None, **card_kwargs)


# (`METHODS` and `PIPELINE_TAGS` are read from the family registry on access)
__all__ = ["BASELINE_NAMES", "CARD_SCORES", "CARD_SCORE_PREFIXES", "DEFAULT_WIDGETS", "EvalRow", "build_model_card",
           "card_from_metrics_file", "has_card_scores", "qa_rows_from_metrics", "summarization_rows_from_metrics"]
