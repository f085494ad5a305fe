"""`hf-readonce demo`: the package's main job, end to end, offline, on real weights and real data.

By default (88.2 s measured on 2 cores of an AMD EPYC: `benchmarks/results/demo/deformer_demo.json`):

1. Loads the reference DeFormer shipped with hf-readonce (its SHA-256 is verified first): all-MiniLM-L6-v2 fine-tuned
   as a full `BertForQuestionAnswering` (`python -m hf_readonce.recipes.reference_qa`, shipped as
   `minilm-qa-reference`), then decomposed at its k (`num_decomposed_layers` in its config) and distilled from that
   full model with the paper's auxiliary supervision (knowledge distillation + layerwise representation similarity,
   DeFormer §3); its `train_results.json` records every command, step count, wall time and the hardware.
2. Encodes each Disfl-QA validation passage once and answers every validation question from the cached passage
   states, with the no-answer threshold (SQuAD 2.0's `null_score_diff_threshold`) recorded in the checkpoint (tuned
   on 10% of the Disfl-QA *train* passages held out of all training).
3. Prints EM/F1 (with SQuAD 2.0's HasAns / NoAns breakdown) beside the trivial baselines of the same questions and,
   when every validation question was answered (no smaller `--max-eval-samples`), the full teacher's recorded
   scores, and the speed-up measured against the same model reading every question+passage pair: the first
   `--speed-eval-samples` (300) questions, split by passage into `--speed-rounds` (3) rounds, each timed on both
   paths in alternating order; the median of the rounds' ratios is printed with their range, and one more line says
   the figure is unreliable when the rounds disagree (max / min > 1.5) or the 1-minute load average exceeded 1.5
   times the usable CPUs. Progress bars (encode, answer, timing; `--no-progress` hides them) and notes go to stderr.

`--model DIR` answers with another DeFormer (`model_type` `deformer_bert`; other families are refused) instead; only
`disfl_qa/validation.jsonl` is read then (`train.jsonl` is needed by `--distill` alone). DIR must hold the model's
tokenizer as well (`tokenizer.save_pretrained(DIR)`): the demo reads the data with it and has no option for another.

With `--distill` it redoes step 1's distillation from the shipped full model instead (`--num-decomposed-layers`,
default 4; `--max-steps`, default 60 of 16 examples), then tunes the threshold on
the held-out train passages and answers as above. Sixty steps show the process but do not reach the shipped
DeFormer's accuracy, which took thousands of steps (see its `train_results.json`). Answers are computed in the dtype
of `hf_readonce.dtypes` (`--compute-dtype auto`: float32 on a CPU, the checkpoint's dtype on CUDA); training uses
bf16 autocast only where the CPU has native bf16 (AVX-512 BF16 or AMX), else fp32.

Without `--output-dir` the run works in a temporary folder that is removed at the end (so a `--distill` model is not
kept); with `--output-dir DIR` (a new or empty folder: one with files is refused), the results (`eval_results.json`)
and, with `--distill`, the distilled model are written to DIR, which the last line names (`hf-readonce publish DIR ...`
publishes that model).
"""

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainingArguments

from ..arguments import OneLineArgumentParser, local_model_or_hub_id, positive_float, positive_int
from ..tasks.question_answering import format_scores
from ..timing import busy_machine_note
from ..weights import REFERENCE_DEFORMER
from .deformer_qa import DataArguments, ModelArguments, run
from .reference_qa import CALIBRATION_FRACTION, hardware_description


def _compute_dtype_name(requested: str, checkpoint) -> str:
    """The dtype answers will be computed in (for the first printed line); `checkpoint` is a dtype or a folder."""
    from ..dtypes import checkpoint_dtype, dtype_name, resolve_compute_dtype

    if not isinstance(checkpoint, torch.dtype):
        path = Path(checkpoint) / "config.json"
        checkpoint = checkpoint_dtype(json.loads(path.read_text(encoding="utf-8-sig"))) if path.is_file() else None
    return dtype_name(resolve_compute_dtype(requested, "cuda" if torch.cuda.is_available() else "cpu", checkpoint))


def _fail(message: str):
    """Stop the demo as every `hf-readonce` command stops on an error: one line `hf-readonce demo: error: ...` on
    stderr, exit status 2."""
    print(f"hf-readonce demo: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_model_type(option: str, model: str, types: tuple[str, ...], wanted: str,
                      architecture: str | None = None) -> None:
    """Stop with one line naming `option` unless the checkpoint `model` (a folder or Hub id) records a `model_type`
    in `types` (and, with `architecture`, an `architectures` entry ending in it where any are recorded): the demo
    loads `--model` as a DeFormer and `--teacher` as a full BERT QA model, and another family would be run as one
    in silence or fail far from the cause."""
    from transformers import PretrainedConfig

    from ..weights import SHIPPED_NAMES

    try:
        config = PretrainedConfig.get_config_dict(model)[0]
    except Exception as error:  # an unreadable config, or a Hub id that cannot be fetched
        lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
        where = "" if Path(model).exists() else (f"no such folder, not a shipped checkpoint (shipped: "
                                                 f"{', '.join(SHIPPED_NAMES)}), and the Hub could not provide it: ")
        _fail(f"{option}: cannot load model {model!r}: {where}{lines[0].rstrip('.')}.")
    found = config.get("model_type")
    if found not in types:
        what = f"a {found} checkpoint" if found else "a checkpoint whose config.json records no model_type"
        _fail(f"{option} {model} is {what}, not {wanted}.")
    architectures = config.get("architectures") or []
    if architecture and architectures and not any(name.endswith(architecture) for name in architectures):
        _fail(f"{option} {model} is a {', '.join(architectures)} checkpoint, not {wanted}.")


# files one of which a saved tokenizer holds (`save_pretrained` of a fast or a slow tokenizer)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model",
                    "sentencepiece.bpe.model", "tokenizer.model")


def _check_tokenizer(option: str, model: str) -> None:
    """Stop with one line naming `option` and the folder unless the checkpoint `model` holds a tokenizer that loads:
    the demo tokenizes questions and passages with the checkpoint's own tokenizer (it has no option that supplies
    another), and a folder saved without one failed deep inside transformers, as an unexpected error."""
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(model)
    except Exception as error:  # no tokenizer files (OSError, ValueError), or files transformers cannot read
        how = (f"save the tokenizer next to the model (`tokenizer.save_pretrained({str(model)!r})`: tokenizer.json, "
               "tokenizer_config.json); the demo has no option that supplies one")
        folder = Path(model)
        if folder.is_dir() and not any((folder / name).is_file() for name in _TOKENIZER_FILES):
            _fail(f"{option}: the folder {model} holds no tokenizer (the demo tokenizes questions and passages with "
                  f"the checkpoint's own): {how}.")
        lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
        _fail(f"{option}: cannot load the tokenizer of {model}: {lines[0].rstrip('.')}; {how}.")


def _is_reference(model: str) -> bool:
    """Whether `model` is the folder of the shipped reference DeFormer (however it was named)."""
    from ..weights import reference_deformer_path

    try:
        return Path(model).resolve() == reference_deformer_path(verify=False).resolve()
    except (FileNotFoundError, ValueError, OSError):
        return False


def _default_data_dir() -> str:
    return os.environ.get("HF_READONCE_DATA", str(Path.cwd().parent / "shared" / "data"))


def _bf16_supported() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _teacher_line(teacher: str, questions: int) -> tuple[str | None, str | None]:
    """The teacher checkpoint's recorded Disfl-QA validation scores (from its `metrics.json`) as a score line, when
    they were recorded on as many questions as were answered here (`questions`); else `(None, note)`, a note saying
    why they are left out (they would sit beside scores of other questions), or `(None, None)` if none are recorded.
    """
    recorded = _recorded(teacher, "metrics.json").get("validation", {}).get("disfl_qa")
    if not recorded or "eval_exact_match" not in recorded:
        return None, None
    if recorded.get("eval_questions") != questions:
        return None, (f"(The teacher's recorded scores, on all {recorded.get('eval_questions', '?')} validation "
                      f"questions, are left out: {questions} were answered here.)")
    scores = {key[len("eval_"):]: value for key, value in recorded.items() if key.startswith("eval_")}
    return format_scores("full MiniLM (teacher, recorded)", scores), None


def _config(model: str) -> dict:
    """The `config.json` of a checkpoint (a folder or a Hub id), or `{}` when it cannot be read."""
    from transformers import PretrainedConfig

    try:
        return PretrainedConfig.get_config_dict(model)[0]
    except Exception:  # (the checkpoint was loaded already; this only words a printed line)
        return {}


def _recorded(folder: str, name: str) -> dict:
    """A JSON record shipped beside a checkpoint (`metrics.json`, `train_results.json`), or `{}`."""
    path = Path(folder) / name
    return json.loads(path.read_text(encoding="utf-8-sig")) if path.is_file() else {}


def _write_train_results(output_dir: str, argv, args, metrics: dict) -> None:
    """Record how a `--distill` run's DeFormer was made (command, steps, wall time, hardware) in
    `output_dir/train_results.json`, for `python -m hf_readonce.recipes.reference_qa export` to ship beside it."""
    command = "hf-readonce demo " + " ".join(sys.argv[2:] if argv is None else argv)
    info = {"command": command, "teacher": args.teacher, "num_decomposed_layers": args.num_decomposed_layers,
            "max_steps": args.max_steps, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
            "distillation": not args.no_distillation, "train_seconds": metrics.get("train_seconds"),
            "train_loss": metrics.get("train_loss"), "torch_threads": torch.get_num_threads(),
            "hardware": hardware_description()}
    with open(Path(output_dir) / "train_results.json", "w") as handle:
        json.dump(info, handle, indent=2)


def main(argv=None) -> dict:
    """Run the demo; `argv` as for the command line (`hf-readonce demo --help`).

    Returns:
        `dict` of metrics (EM/F1 from the cache with HasAns/NoAns, baselines, threshold, timings in seconds,
        speed-ups: medians of the interleaved rounds, with their `_range`, `speed_rounds`, and the load average).

    Raises:
        SystemExit: status 2 after one line `hf-readonce demo: error: ...` on stderr when the data files or the
            reference checkpoint are missing, or the reference checkpoint fails its checksum; when `--model` is
            not a DeFormer or `--teacher` not a full BERT QA model (either missing or unreadable); when the checkpoint
            whose tokenizer reads the data (`--model`, or `--teacher` with `--distill`) holds none; or on a usage
            error (a count below 1, a learning rate not > 0, an unknown option).
    """
    parser = OneLineArgumentParser(prog="hf-readonce demo", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", "--data_dir", default=_default_data_dir(),
                        help="folder holding disfl_qa/{train,validation}.jsonl (default: $HF_READONCE_DATA when set, "
                             "else ../shared/data)")
    parser.add_argument("--distill", action="store_true",
                        help="distil a DeFormer from the full reference model here instead of answering with the "
                             "shipped one: --max-steps (60) steps of about 2.3 s each on 2 idle CPU cores, about 2.5 "
                             "minutes of training; then the threshold is tuned on the held-out train passages and the "
                             "questions are answered as by the default demo (far longer on a busy machine)")
    parser.add_argument("--model", default=None,
                        help="DeFormer checkpoint (model_type deformer_bert) to answer with (default: the shipped "
                             "reference DeFormer); ignored with --distill")
    parser.add_argument("--teacher", default=None,
                        help="with --distill: full BERT QA checkpoint (BertForQuestionAnswering) to decompose and "
                             "distil from (default: the shipped reference)")
    parser.add_argument("--num-decomposed-layers", "--num_decomposed_layers", type=positive_int, default=4,
                        help="with --distill: k (default 4)")
    parser.add_argument("--max-steps", "--max_steps", type=positive_int, default=60,
                        help="with --distill: steps of --batch-size examples (default 60)")
    parser.add_argument("--batch-size", "--batch_size", type=positive_int, default=16,
                        help="with --distill: training examples per step (default 16)")
    parser.add_argument("--learning-rate", "--learning_rate", type=positive_float, default=1e-4,
                        help="with --distill: peak learning rate (default 1e-4)")
    parser.add_argument("--no-distillation", "--no_distillation", action="store_true",
                        help="with --distill: train on the span loss only (no KD+LRS from the teacher)")
    parser.add_argument("--max-train-samples", "--max_train_samples", type=positive_int, default=None,
                        help="read only the first N train rows (quick tries; the calibration split comes from them; "
                             "default: all)")
    parser.add_argument("--max-eval-samples", "--max_eval_samples", type=positive_int, default=None,
                        help="answer only the first N validation questions (default: all)")
    parser.add_argument("--speed-eval-samples", "--speed_eval_samples", type=positive_int, default=300,
                        help="questions timed on both paths for the speed-up (accuracy always uses all; default 300)")
    parser.add_argument("--speed-rounds", "--speed_rounds", type=positive_int, default=3,
                        help="interleaved rounds the timed questions are split into, by passage (the order of the "
                             "two paths alternates from round to round); the speed-up printed is the median of the "
                             "rounds' ratios, with their range (default 3)")
    parser.add_argument("--output-dir", "--output_dir", default=None,
                        help="where to write the results and, with --distill, the model (default: a temporary folder, "
                             "removed at the end)")
    parser.add_argument("--compute-dtype", "--compute_dtype", default="auto",
                        choices=("auto", "float32", "bfloat16", "float16"),
                        help="dtype answers are computed in (hf_readonce.dtypes): auto (default) = float32 on a CPU, the "
                             "checkpoint's dtype on CUDA")
    parser.add_argument("--json", action="store_true",
                        help="print every metric as one JSON object instead of the summary")
    parser.add_argument("--no-bf16", "--no_bf16", action="store_true",
                        help="train in fp32 even where the CPU has native bf16 (answers: see --compute-dtype)")
    parser.add_argument("--no-progress", "--no_progress", action="store_true",
                        help="no progress bars (weight loading, training, encoding, answering and timing)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    output_dir = Path(args.output_dir).expanduser() if args.output_dir is not None else None
    if output_dir is not None and (output_dir.is_file() or (output_dir.is_dir() and any(output_dir.iterdir()))):
        _fail(f"--output-dir {args.output_dir} is not an empty folder: the demo writes a model and its results there "
              "and would replace files of the same names; give a new or empty folder.")
    data_dir = Path(args.data_dir).expanduser()
    if not (data_dir / "disfl_qa").is_dir() and (data_dir / "train.jsonl").is_file():
        data_dir = data_dir.parent  # the disfl_qa/ folder itself was named
    train_file, validation_file = data_dir / "disfl_qa" / "train.jsonl", data_dir / "disfl_qa" / "validation.jsonl"
    # train is read only by --distill (training rows, and the held-out passages the threshold is tuned on); the
    # default demo answers with the threshold the checkpoint records
    for path in (train_file, validation_file) if args.distill else (validation_file,):
        if not path.is_file():
            why = " (--distill trains on it and tunes the no-answer threshold on its held-out passages)" \
                if path == train_file else ""
            _fail(f"{path} not found{why}; pass --data-dir (the folder holding disfl_qa/, e.g. shared/data) or set "
                  "$HF_READONCE_DATA.")
    from ..weights import reference_deformer_path, reference_qa_path

    try:
        if args.teacher is None:
            args.teacher = str(reference_qa_path())
        if not args.distill and args.model is None:
            args.model = str(reference_deformer_path())
        # the names `hf-readonce checkpoints` lists are accepted too; a local path that does not exist is refused
        # here, before any Hub lookup (as `encode` does)
        for name in ("teacher",) if args.distill else ("teacher", "model"):  # (--model is ignored with --distill)
            try:
                setattr(args, name, local_model_or_hub_id(getattr(args, name)))
            except (FileNotFoundError, ValueError) as error:
                _fail(f"--{name}: {error}")
    except (FileNotFoundError, ValueError) as error:
        _fail(str(error))
    if not args.distill:
        _check_model_type("--model", args.model, ("deformer_bert",), "a DeFormer (model_type deformer_bert)")
    _check_model_type("--teacher", args.teacher, ("bert",),
                      "a full BERT extractive-QA model (model_type bert, BertForQuestionAnswering)",
                      architecture="ForQuestionAnswering")
    # the checkpoint whose tokenizer reads the data: the teacher's with --distill (the student starts from it)
    _check_tokenizer(*(("--teacher", args.teacher) if args.distill else ("--model", args.model)))
    with contextlib.ExitStack() as stack:
        if args.no_progress:
            from ..arguments import silence_progress_bars

            stack.callback(silence_progress_bars())  # (put back as they were: `main` may be called from Python)
        stack.enter_context(_notes_as_lines())
        if args.output_dir is None:
            output_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="hf-readonce-demo-"))
            return _run(args, argv, output_dir, train_file, validation_file, keep=False)
        return _run(args, argv, str(output_dir), train_file, validation_file, keep=True)  # `~` expanded, as checked


class _NoteFormatter(logging.Formatter):
    """`hf-readonce demo: note: MESSAGE` for warnings (the way the CLI prints its notes), `hf-readonce demo: error:
    MESSAGE` from errors up."""

    def format(self, record: logging.LogRecord) -> str:
        return f"hf-readonce demo: {'error' if record.levelno >= logging.ERROR else 'note'}: {record.getMessage()}"


@contextlib.contextmanager
def _notes_as_lines():
    """While the demo runs, print what the package logs at WARNING and above (e.g. the rows of the data file set
    aside) as one `hf-readonce demo: note: ...` line on stderr, not in logging's raw `WARNING:name:message` form."""
    package = logging.getLogger("hf_readonce")
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_NoteFormatter())
    propagate = package.propagate
    package.addHandler(handler)
    package.propagate = False
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.propagate = propagate


def speed_line(metrics: dict) -> str:
    """The demo's speed-up line: each speed-up (the median over the interleaved rounds) with the range of the rounds'
    ratios and the FLOP ratio beside it.

    Args:
        metrics (`dict`): what [`~hf_readonce.recipes.deformer_qa.run`] returns with `eval_paths="both"`:
            `speed_questions`, `speed_rounds`, `speedup_precomputed` / `speedup_including_encoding` and their
            `_range` (`[min, max]`), `flop_ratio_precomputed` / `flop_ratio_including_encoding`.
    """
    rounds = metrics.get("speed_rounds", 1)

    def figure(name: str) -> str:
        spread = metrics.get(f"speedup_{name}_range")
        return f"{metrics[f'speedup_{name}']:.2f}x" + (f" (range {spread[0]:.2f}-{spread[1]:.2f}x)"
                                                       if spread and rounds > 1 else "")

    how = f"median of {rounds} interleaved rounds" if rounds > 1 else "in one round"
    return (f"Speed-up over the same model reading every question+passage pair ({metrics['speed_questions']} "
            f"questions timed, {how}): {figure('precomputed')} with passages precomputed (FLOP ratio "
            f"{metrics['flop_ratio_precomputed']:.2f}x), {figure('including_encoding')} including encoding each "
            f"passage once (FLOP ratio {metrics['flop_ratio_including_encoding']:.2f}x).")


def _run(args, argv, output_dir: str, train_file: Path, validation_file: Path, keep: bool) -> dict:
    """The demo's work in `output_dir` (removed afterwards by the caller unless `keep`)."""
    bf16 = _bf16_supported() and not args.no_bf16 and not torch.cuda.is_available()
    reference = not args.distill and _is_reference(args.model)
    announce = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON document only
    data_kwargs = dict(train_file=str(train_file), validation_file=str(validation_file), max_seq_length=256,
                       max_question_length=48, doc_stride=64, allow_no_answer=True,
                       max_train_samples=args.max_train_samples, max_eval_samples=args.max_eval_samples,
                       eval_paths="both", speed_eval_samples=args.speed_eval_samples,
                       speed_rounds=args.speed_rounds)
    if args.distill:
        model_args = ModelArguments(model_name_or_path=args.teacher, num_decomposed_layers=args.num_decomposed_layers,
                                    teacher_model_name_or_path=None if args.no_distillation else args.teacher,
                                    compute_dtype=args.compute_dtype)
        data_args = DataArguments(calibration_fraction=CALIBRATION_FRACTION, **data_kwargs)
        training_args = TrainingArguments(
            output_dir=output_dir, do_train=True, do_eval=True, max_steps=args.max_steps,
            per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate,
            warmup_steps=max(1, args.max_steps // 10), weight_decay=0.01, bf16=bf16,
            use_cpu=not torch.cuda.is_available(), save_strategy="no", report_to="none",
            logging_steps=max(1, args.max_steps // 5), seed=42, disable_tqdm=args.no_progress,
        )
        print(f"hf-readonce demo --distill: reference MiniLM QA model -> DeFormer (k={args.num_decomposed_layers}), "
              f"{args.max_steps} steps of {args.batch_size} on {train_file} "
              f"({'span loss only' if args.no_distillation else 'span + KD + LRS from the full model'}; bf16 "
              f"training: {bf16}), then answering {validation_file} from cached passage states in "
              f"{_compute_dtype_name(args.compute_dtype, torch.float32)}", file=announce, flush=True)
    else:
        # The threshold recorded in the checkpoint was tuned on the held-out train passages when it was distilled.
        model_args = ModelArguments(model_name_or_path=args.model, compute_dtype=args.compute_dtype)
        data_args = DataArguments(calibration_fraction=0.0, **data_kwargs)
        training_args = TrainingArguments(output_dir=output_dir, do_train=False, do_eval=True, report_to="none",
                                          use_cpu=not torch.cuda.is_available(), disable_tqdm=args.no_progress)
        which = "the reference DeFormer" if reference else "the DeFormer"
        print(f"hf-readonce demo: {which} ({args.model}) answers {validation_file} from cached "
              f"passage states in {_compute_dtype_name(args.compute_dtype, args.model)} (`--distill` to distil one "
              "here instead)", file=announce, flush=True)
    start = time.perf_counter()
    with contextlib.redirect_stdout(announce):  # Trainer's log lines too: with --json, stdout is the JSON alone
        metrics = run(model_args, data_args, training_args)
    metrics["demo_seconds"] = round(time.perf_counter() - start, 1)
    if args.distill:
        _write_train_results(output_dir, argv, args, metrics)
    busy = busy_machine_note(metrics)
    if args.json:
        print(json.dumps(metrics, indent=2), flush=True)
        if busy:
            print(f"hf-readonce demo: note: {busy}", file=sys.stderr, flush=True)
        return metrics
    lines = [
        "",
        f"Disfl-QA validation: {metrics['eval_questions']} questions over {metrics['eval_passages']} passages, "
        f"answered from cached passage states:",
        "  " + format_scores(f"DeFormer k={metrics['num_decomposed_layers']} "
                             f"({'distilled here' if args.distill else 'shipped reference' if reference else args.model})",
                             {key[len("cached_"):]: value for key, value in metrics.items()
                              if key.startswith("cached_") and not key.endswith("_seconds")}),
    ]
    teacher, teacher_note = _teacher_line(args.teacher, metrics["eval_questions"])
    if teacher:
        lines.append("  " + teacher)
    for name, scores in metrics["baselines"].items():  # (computed on the questions answered here)
        lines.append("  " + format_scores(f"baseline: {name.replace('_', '-')}", scores))
    if teacher_note:
        lines.append(teacher_note)
    best_name, best = max(metrics["baselines"].items(), key=lambda item: item[1]["f1"])
    has_f1 = metrics.get("cached_HasAns_f1", metrics["cached_f1"])
    answers = metrics["cached_f1"] >= best["f1"] + 15 and has_f1 >= 40
    lines.append(
        f"Verdict: {'the DeFormer answers' if answers else 'the DeFormer does NOT answer well enough'}: F1 "
        f"{metrics['cached_f1']:.2f} against {best['f1']:.2f} for the best trivial baseline ({best_name.replace('_', '-')}), "
        f"HasAns F1 {has_f1:.2f} (goal: baseline + 15 and HasAns F1 >= 40).")
    if args.distill:
        tuned = (f"tuned on {metrics.get('calibration_questions', 0)} held-out Disfl-QA train questions (F1 there "
                 f"{metrics.get('calibration_f1', float('nan')):.2f})")
    else:
        recorded = _recorded(args.model, "metrics.json")
        made = _recorded(args.model, "train_results.json")
        if _config(args.model).get("null_score_diff_threshold") is None:
            tuned = "the default: the checkpoint records none"
        elif isinstance(recorded.get("calibration_questions"), int):
            tuned = (f"recorded in the checkpoint, tuned on {recorded['calibration_questions']} held-out "
                     f"Disfl-QA train questions when it was distilled")
        else:
            tuned = "recorded in the checkpoint"
        if made:
            stages = made.get("stages") or []
            how = made.get("summary") or (f"in {len(stages)} consecutive runs, the last `{made.get('command')}` (all listed in its "
                   "train_results.json)" if len(stages) > 1 else f"once by `{made.get('command')}`")
            lines.append(f"The {'shipped ' if reference else ''}DeFormer was distilled {how} ({made.get('max_steps')} steps of "
                         f"{made.get('batch_size')}, {made.get('train_seconds')} s on {made.get('hardware')})"
                         + ("; `--distill` redoes a shorter run here." if reference else "."))
    lines += [
        f"No-answer threshold {metrics.get('null_score_diff_threshold', 0.0):.3f}, {tuned}.",
        speed_line(metrics),
    ]
    if busy:
        lines.append(busy)
    lines.append(f"Demo time: {metrics['demo_seconds']:.0f} s (every metric: --json).")
    if keep and args.distill:
        lines.append(f"Model and results written to {output_dir} (its config records the windowing and threshold; "
                     f"`hf-readonce encode/answer {shlex.quote(str(output_dir))} ...` use them by default; "
                     f"`hf-readonce publish {shlex.quote(str(output_dir))} --repo-id OWNER/NAME --metrics "
                     f"{shlex.quote(str(Path(output_dir) / 'eval_results.json'))} --dataset-type "
                     f"{REFERENCE_DEFORMER.card_dataset_type} --dataset-name {REFERENCE_DEFORMER.card_dataset_name}` "
                     "publishes it with these scores on its card).")
    elif keep:
        lines.append(f"Results written to {output_dir}/eval_results.json.")
    elif args.distill:
        lines.append("The distilled model was not kept (pass --output-dir DIR to keep it).")
    print("\n".join(lines), flush=True)
    return metrics


if __name__ == "__main__":
    main()
