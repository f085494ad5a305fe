"""Runs every trainable family on a tiny random config through `transformers.Trainer` / `Seq2SeqTrainer` with the
`TrainingArguments` users set, and prints one line per family and setting: `ok` (it runs and the figure checked agrees
with a direct computation), `refused` (a `ValueError` / `TypeError`, its message beside: read it to see that it names
the setting), `WRONG` (it runs but a figure differs), `CRASH` (another exception) or, for `compile`, `skipped` (over
`--compile-timeout`).

    PYTHONPATH=src python utils/trainer_matrix.py [--families deformer,longdoc] [--settings gc,accum] [--compile]
    PYTHONPATH=src python utils/trainer_matrix.py --ddp [--families ...]

Run from the repository root (it builds its tiny models and batches with the test suite's helpers). CPU only; the
`compile` column (`torch_compile=True`) runs each family in a subprocess and stops it after `--compile-timeout`
seconds (default 600: compiling a family's training step takes minutes on 2 CPU cores).

`--ddp` prints the `ddp` and `ddp_gc` columns instead: one `torchrun --nproc_per_node 2` run (gloo) trains every
family for two steps under `DistributedDataParallel` with Trainer's defaults (`ddp_gc`: `gradient_checkpointing=True`,
for which Trainer passes `find_unused_parameters=False`), and each cell is `ok` when both processes' parameters and
buffers equal those of one process reading the same global batches, `WRONG` when they differ, `CRASH` with the
first line of a process's error."""

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

warnings.filterwarnings("ignore")


# ------------------------------------------------------------------------------------------------------ families
def _deformer():
    from tests.models.deformer_bert.test_modeling_deformer_bert import make_pairs, tiny_deformer

    (ids, types, mask), _, _ = make_pairs([5, 6, 4, 7, 5, 6, 4, 7], [7, 8, 9, 6, 9, 8, 7, 6])
    rows = [{"input_ids": ids[i], "token_type_ids": types[i], "attention_mask": mask[i],
             "start_positions": torch.tensor(6 + i % 3), "end_positions": torch.tensor(8 + i % 3)} for i in range(8)]
    return dict(build=lambda: tiny_deformer(k=2).train(), rows=rows, collator=None,
                auto="AutoModelForQuestionAnswering", seq2seq=False, output="start_logits")


def _deformer_distillation():
    from tests.models.deformer_bert.test_modeling_deformer_bert import tiny_deformer

    return {**_deformer(), "teacher": lambda: tiny_deformer(k=0, seed=5)}


def _readonce(with_documents):
    def make():
        from tests.models.readonce_bart.test_modeling_readonce_bart import tiny, tokens

        ids, docs, targets = tokens(8, 6), tokens(8, 20, seed=3), tokens(8, 5, seed=4)
        targets[0, 2:] = -100
        rows = []
        for i in range(8):
            row = {"input_ids": ids[i], "attention_mask": torch.ones_like(ids[i]), "labels": targets[i]}
            if with_documents:
                row["document_input_ids"] = docs[i]
            rows.append(row)
        def build():
            model = tiny(dropout=0.0).train()
            if not with_documents:  # closed-book reads no document: frozen as in the recipe's baseline (see --ddp)
                model.freeze_document_encoder()
            return model

        return dict(build=build, rows=rows, collator=None, auto="AutoModelForSeq2SeqLM", seq2seq=True, output="logits")
    return make


def _readtwice_qa():
    from hf_readonce.tasks.readtwice_qa import ReadTwiceQACollator
    from tests.models.readtwice_bert.test_modeling_readtwice_bert import tiny_features, tiny_qa

    return dict(build=lambda: tiny_qa(memory_type="entity").train(), rows=tiny_features(n=8),
                collator=ReadTwiceQACollator(0, with_entities=True), auto="AutoModelForQuestionAnswering",
                seq2seq=False, output="start_logits")


def _readtwice_mlm():
    from hf_readonce import ReadTwiceBertForMaskedLM
    from tests.models.readtwice_bert.test_modeling_readtwice_bert import segments, tiny_config

    ids = segments(8)
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    masked = ids.clone()
    masked[:, 3] = 4
    rows = [{"input_ids": masked[i], "labels": labels[i], "document_ids": torch.tensor(i)} for i in range(8)]

    def build():
        torch.manual_seed(0)
        return ReadTwiceBertForMaskedLM(tiny_config(memory_type="sts")).train()

    return dict(build=build, rows=rows, collator=None, auto="AutoModelForMaskedLM", seq2seq=False, output="logits")


def _longdoc():
    from tests.models.longdoc_bart.test_modeling_longdoc_bart import longdoc, tokens

    ids, targets = tokens(8, 20), tokens(8, 5, seed=5)
    targets[0, 1:] = -100
    rows = [{"input_ids": ids[i], "attention_mask": torch.ones_like(ids[i]), "labels": targets[i]} for i in range(8)]
    return dict(build=lambda: longdoc(encoder_attention_type="neighborhood", neighborhood_radius=3).train(),
                rows=rows, collator=None, auto="AutoModelForSeq2SeqLM", seq2seq=True, output="logits")


def _block_attention():
    from tests.models.block_attention_llama.test_modeling_block_attention_llama import ids, tiny

    block_ids = torch.tensor([0] * 8 + [1] * 7 + [-1] * 5)
    rows = []
    for seed in range(8):
        sequence = ids(20, seed)[0]
        rows.append({"input_ids": sequence, "block_ids": block_ids,
                     "labels": torch.where(block_ids == -1, sequence, torch.full_like(sequence, -100))})
    return dict(build=lambda: tiny().train(), rows=rows, collator=None, auto="AutoModelForCausalLM", seq2seq=False,
                output="logits", causal=True)


def _recurrent(family):
    def make():
        from tests.models.recurrent.test_modeling_recurrent import ids, tiny

        stream = ids(8, 40)
        rows = [{"input_ids": stream[i], "labels": stream[i]} for i in range(8)]
        return dict(build=lambda: tiny(family).train(), rows=rows, collator=None, auto="AutoModelForCausalLM",
                    seq2seq=False, output="logits", causal=True)
    return make


FAMILIES = {"deformer": _deformer, "deformer_distillation": _deformer_distillation, "readonce_seq2seq": _readonce(False), "readonce_qa": _readonce(True),
            "readtwice_qa": _readtwice_qa, "readtwice_mlm": _readtwice_mlm, "longdoc": _longdoc,
            "block_attention": _block_attention, "recurrent_gpt2": _recurrent("gpt2"),
            "recurrent_llama": _recurrent("llama")}


# ------------------------------------------------------------------------------------------------------ helpers
class Wrong(AssertionError):
    pass


def check(condition, message):
    if not condition:
        raise Wrong(message)


def collate(spec, rows):
    from transformers import default_data_collator

    return (spec["collator"] or default_data_collator)(rows)


def args_for(spec, output_dir, **overrides):
    from transformers import Seq2SeqTrainingArguments, TrainingArguments

    kwargs = dict(output_dir=str(output_dir), max_steps=3, per_device_train_batch_size=2, learning_rate=1e-2,
                  use_cpu=True, report_to=[], save_strategy="no", remove_unused_columns=False, logging_steps=1,
                  disable_tqdm=True, max_grad_norm=0.0, log_level="error")
    kwargs.update(overrides)
    return (Seq2SeqTrainingArguments if spec["seq2seq"] else TrainingArguments)(**kwargs)


def trainer_for(spec, model, args, **kwargs):
    from transformers import Seq2SeqTrainer, Trainer
    from transformers.trainer_callback import PrinterCallback

    cls = Seq2SeqTrainer if spec["seq2seq"] else Trainer
    if spec.get("teacher"):  # DeFormer's auxiliary supervision: the teacher's outputs go into the student's loss
        from hf_readonce import DeformerDistillationTrainer

        cls, kwargs = DeformerDistillationTrainer, {**kwargs, "teacher_model": spec["teacher"]()}
    trainer = cls(model=model, args=args, train_dataset=spec["rows"], data_collator=spec["collator"], **kwargs)
    trainer.remove_callback(PrinterCallback)  # the logs stay in `state.log_history`; stdout keeps only the matrix
    return trainer


def losses(trainer, after=0):
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry and entry["step"] > after]


def train_losses(spec, output_dir, **overrides):
    trainer = trainer_for(spec, spec["build"](), args_for(spec, output_dir, **overrides))
    trainer.train()
    return losses(trainer), trainer


def close(a, b, rtol=1e-4, atol=1e-6):
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=rtol, abs_tol=atol) for x, y in zip(a, b))


def smoothed(logits, labels, epsilon, shift):
    """The label-smoothed cross-entropy `LabelSmoother` means, computed here with the labels aligned by hand."""
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    logp = torch.log_softmax(logits.float(), dim=-1)
    keep = labels != -100
    nll = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep]
    uniform = -logp.mean(-1)[keep]
    return float((1 - epsilon) * nll.mean() + epsilon * uniform.mean())


# ------------------------------------------------------------------------------------------------------ settings
def s_gc(spec, tmp):
    plain, _ = train_losses(spec, tmp / "plain")
    out = []
    for kwargs in (None, {"use_reentrant": False}):
        got, trainer = train_losses(spec, tmp / f"gc{kwargs}", gradient_checkpointing=True,
                                    gradient_checkpointing_kwargs=kwargs)
        check(close(got, plain, rtol=1e-4), f"checkpointed losses {got} != plain {plain} (kwargs {kwargs})")
        out.append(getattr(trainer.model, "is_gradient_checkpointing", None))
    return f"losses = plain; is_gradient_checkpointing {out}"


def s_accum(spec, tmp):
    from tests.models.loss_checks import trainer_gradients

    rows = spec["rows"][:4]
    _, whole = trainer_gradients(spec["build"](), rows, 4, 1, tmp / "whole", spec["collator"])
    accepts, halves = trainer_gradients(spec["build"](), rows, 2, 2, tmp / "halves", spec["collator"])
    check(whole.keys() == halves.keys() and whole, "different parameters got gradients")
    scale = max(float(g.abs().max()) for g in whole.values())
    worst = max(float((halves[n] - g).abs().max()) for n, g in whole.items()) / scale
    check(worst < 1e-4, f"accumulated gradients differ from one batch of twice the size (worst {worst:.3g} of the "
          "largest gradient)")
    return f"= one batch of 4 (accepts_loss_kwargs={accepts})"


def s_bf16(spec, tmp):
    plain, _ = train_losses(spec, tmp / "plain")
    got, _ = train_losses(spec, tmp / "bf16", bf16=True)
    check(all(math.isfinite(x) for x in got), f"bf16 losses {got}")
    check(close(got, plain, rtol=5e-2, atol=5e-2), f"bf16 losses {got} far from fp32 {plain}")
    return f"{[round(x, 3) for x in got]} ~ fp32"


def s_smooth(spec, tmp):
    epsilon = 0.1
    model = spec["build"]()
    if spec["seq2seq"]:  # as DataCollatorForSeq2Seq(model=model) does: the smoother takes `labels` out of the batch
        spec = {**spec, "rows": [{**row, "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(
            labels=row["labels"][None])[0]} for row in spec["rows"]]}
    eval_rows = spec["rows"][:4]
    trainer = trainer_for(spec, model, args_for(spec, tmp / "ls", label_smoothing_factor=epsilon,
                                                per_device_eval_batch_size=4, max_steps=2))
    trainer.train()
    metrics = trainer.evaluate(eval_rows)
    batch = collate(spec, eval_rows)
    if "labels" not in batch:
        return f"ignored: no `labels` column (eval_loss {metrics['eval_loss']:.4f} is the unsmoothed loss)"
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
    expected = smoothed(logits, batch["labels"], epsilon, spec.get("causal", False))
    check(math.isclose(metrics["eval_loss"], expected, rel_tol=1e-4),
          f"eval_loss {metrics['eval_loss']:.5f} != smoothed loss {expected:.5f}")
    return f"eval_loss = smoothed ({expected:.4f})"


def s_smooth_bare(spec, tmp):
    """Label smoothing on seq2seq rows without `decoder_input_ids` (the Trainer takes the labels out)."""
    if not spec["seq2seq"]:
        return "n/a"
    trainer = trainer_for(spec, spec["build"](), args_for(spec, tmp / "lsb", label_smoothing_factor=0.1,
                                                          max_steps=1))
    trainer.train()
    raise Wrong(f"trained without decoder inputs: losses {losses(trainer)}")


def _s_eval(spec, tmp, loss_only):
    eval_rows = spec["rows"][:4]
    model = spec["build"]()
    trainer = trainer_for(spec, model, args_for(spec, tmp / "eval", eval_strategy="steps", eval_steps=1,
                                                per_device_eval_batch_size=2, prediction_loss_only=loss_only,
                                                max_steps=2), eval_dataset=eval_rows)
    trainer.train()
    evals = [e["eval_loss"] for e in trainer.state.log_history if "eval_loss" in e]
    check(len(evals) == 2, f"{len(evals)} evaluations")
    model.eval()
    with torch.no_grad():
        expected = sum(float(model(**collate(spec, eval_rows[i:i + 2])).loss) for i in (0, 2)) / 2
    check(math.isclose(evals[-1], expected, rel_tol=1e-4), f"eval_loss {evals[-1]} != {expected}")
    if not loss_only:
        prediction = trainer.predict(eval_rows)
        check(prediction.predictions is not None, "no predictions")
    return f"eval_loss = direct ({expected:.4f})"


def s_eval_loss_only(spec, tmp):
    return _s_eval(spec, tmp, True)


def s_eval_full(spec, tmp):
    return _s_eval(spec, tmp, False)


def s_generate(spec, tmp):
    if not spec["seq2seq"]:
        return "n/a"
    eval_rows = spec["rows"][:4]
    model = spec["build"]()
    trainer = trainer_for(spec, model, args_for(spec, tmp / "gen", predict_with_generate=True, max_steps=1,
                                                per_device_eval_batch_size=4, generation_max_length=6,
                                                generation_num_beams=1))
    trainer.train()
    prediction = trainer.predict(eval_rows)
    batch = collate(spec, eval_rows)
    batch.pop("labels")
    model.eval()
    with torch.no_grad():
        expected = model.generate(**batch, max_length=6, num_beams=1, do_sample=False)
    got = torch.as_tensor(prediction.predictions)
    got = got[:, : expected.shape[1]]
    check(torch.equal(got, expected), f"predictions {got.tolist()} != generate {expected.tolist()}")
    check(math.isfinite(prediction.metrics["test_loss"]), "no loss")
    return "predictions = generate()"


def s_tokens(spec, tmp):
    _, trainer = train_losses(spec, tmp / "tok", include_num_input_tokens_seen=True, max_steps=2)
    return f"num_input_tokens_seen={trainer.state.num_input_tokens_seen}"


def s_resume(spec, tmp):
    whole, _ = train_losses(spec, tmp / "a", max_steps=4, save_strategy="steps", save_steps=2)
    resumed_dir = tmp / "b"
    resumed_dir.mkdir()
    shutil.copytree(tmp / "a" / "checkpoint-2", resumed_dir / "checkpoint-2")
    trainer = trainer_for(spec, spec["build"](), args_for(spec, resumed_dir, max_steps=4, save_strategy="steps",
                                                          save_steps=2))
    trainer.train(resume_from_checkpoint=True)
    got = losses(trainer, after=2)
    check(close(got, whole[2:], rtol=1e-5), f"resumed losses {got} != uninterrupted {whole[2:]}")
    return "resumed losses = uninterrupted"


def s_roundtrip(spec, tmp):
    import transformers

    model = spec["build"]()
    trainer = trainer_for(spec, model, args_for(spec, tmp / "rt", max_steps=2))
    trainer.train()
    model.save_pretrained(tmp / "saved")
    loaded = getattr(transformers, spec["auto"]).from_pretrained(tmp / "saved", trust_remote_code=True).eval()
    model.eval()
    batch = collate(spec, spec["rows"][:2])
    with torch.no_grad():
        a, b = getattr(model(**batch), spec["output"]), getattr(loaded(**batch), spec["output"])
    check(torch.allclose(a, b, atol=1e-6), f"logits differ by {float((a - b).abs().max())}")
    return f"same logits ({type(loaded).__name__})"


SETTINGS = {"gc": s_gc, "accum": s_accum, "bf16": s_bf16, "smooth": s_smooth, "smooth_bare": s_smooth_bare,
            "eval_loss_only": s_eval_loss_only,
            "eval_full": s_eval_full, "generate": s_generate, "tokens": s_tokens, "resume": s_resume,
            "roundtrip": s_roundtrip}


def run_cell(family, setting):
    spec = FAMILIES[family]()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            return "ok", SETTINGS[setting](spec, Path(tmp))
        except Wrong as error:
            return "WRONG", str(error)
        except (ValueError, TypeError) as error:
            return "refused", f"{type(error).__name__}: {str(error)[:300]}"
        except Exception as error:  # noqa: BLE001
            tb = traceback.extract_tb(error.__traceback__)[-1]
            return "CRASH", f"{type(error).__name__}: {str(error)[:200]} ({Path(tb.filename).name}:{tb.lineno})"


def run_compile(family, timeout: float = 600.0):
    """The `compile` cell of `family`: two `torch_compile=True` steps against two eager ones in a subprocess, stopped
    (`skipped`) after `timeout` seconds."""
    code = (f"import sys; sys.argv=['x']; from utils.trainer_matrix import *; spec = FAMILIES[{family!r}]();"
            "import tempfile, pathlib; d = pathlib.Path(tempfile.mkdtemp());"
            "l, _ = train_losses(spec, d / 'c', torch_compile=True, max_steps=2);"
            "p, _ = train_losses(spec, d / 'p', max_steps=2); print('LOSSES', l, p, close(l, p, rtol=1e-3))")
    start = time.time()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "skipped", f"over {timeout:g} s (--compile-timeout)"
    lines = [line for line in done.stdout.splitlines() if line.startswith("LOSSES")]
    if done.returncode or not lines:
        return "CRASH", done.stderr.strip().splitlines()[-1][:200] if done.stderr.strip() else "no output"
    return ("ok" if lines[0].endswith("True") else "WRONG"), f"{lines[0]} ({time.time() - start:.0f} s)"


# ------------------------------------------------------------------------------------------------------ ddp
# `--ddp`: two optimizer steps of each family under `DistributedDataParallel` (torchrun, 2 CPU processes, gloo) with
# Trainer's DDP defaults, against one process reading the same global batches. Plain SGD: an update proportional to
# the gradient, so a loss divided wrongly for the global batch shows (Adam's first steps do not depend on its scale).
DDP_SETTINGS = {"ddp": {}, "ddp_gc": {"gradient_checkpointing": True}}
DDP_RANKS, DDP_BATCH, DDP_RTOL = 2, 2, 1e-4
DDP_STOP_TIMEOUT = 60.0  # seconds torchrun gets to stop its workers after SIGTERM (it waits 30 s for them)


def ddp_state(spec, output_dir, world_size, setting):
    """Parameters and buffers `{name: tensor}` after two `Trainer` steps of `DDP_RANKS * DDP_BATCH` rows each, read
    `DDP_BATCH` rows per process on `world_size` processes (1 or `DDP_RANKS`)."""
    args = args_for(spec, output_dir, max_steps=2, per_device_train_batch_size=DDP_BATCH * DDP_RANKS // world_size,
                    optim="sgd", learning_rate=0.1, ddp_timeout=120, **DDP_SETTINGS[setting])
    trainer = trainer_for(spec, spec["build"](), args)
    trainer.train()
    wrapped = type(trainer.model_wrapped).__name__
    if trainer.args.world_size != world_size or (world_size > 1) != (wrapped == "DistributedDataParallel"):
        raise RuntimeError(f"expected {world_size} process(es), ran {trainer.args.world_size} around {wrapped}")
    model = trainer.accelerator.unwrap_model(trainer.model)
    return {name: tensor.detach().clone() for name, tensor in [*model.named_parameters(), *model.named_buffers()]}


def ddp_worker(output_dir: Path, families, settings):
    """Run under `torchrun --nproc_per_node DDP_RANKS`: each cell's final state (or its one-line error) goes to
    `output_dir/rank<r>.pt`. A cell that leaves the ranks out of step (one failed, one waits) ends the run."""
    import torch.distributed as dist

    results = {}
    rank = None
    for family in families:
        spec = FAMILIES[family]()
        for setting in settings:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    results[family, setting] = ddp_state(spec, Path(tmp), DDP_RANKS, setting)
                except Exception as error:  # noqa: BLE001
                    tb = traceback.extract_tb(error.__traceback__)[-1]
                    first = (str(error).strip().splitlines() or [""])[0][:200]
                    results[family, setting] = f"{type(error).__name__}: {first} ({Path(tb.filename).name}:{tb.lineno})"
            rank = dist.get_rank()
            torch.save(results, output_dir / f"rank{rank}.pt")
            try:
                dist.monitored_barrier(timeout=__import__("datetime").timedelta(seconds=120))
            except Exception:  # noqa: BLE001
                return


def run_ddp(families, settings=tuple(DDP_SETTINGS), timeout: float = 900.0) -> dict:
    """`{(family, setting): (outcome, detail)}`: `ok` when both ranks' parameters and buffers after two DDP steps
    equal those of one process reading the same global batches (within `DDP_RTOL` of the largest update), `WRONG`
    when they differ, `CRASH` (the error's first line) when a rank raised or did not finish within `timeout` s
    (torchrun and its workers are then stopped: SIGTERM, SIGKILL after `DDP_STOP_TIMEOUT` s)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={DDP_RANKS}",
                   str(Path(__file__).resolve()), "--ddp-worker", str(tmp), "--families", ",".join(families),
                   "--settings", ",".join(settings)]
        # torchrun starts each worker in a session of its own: killing torchrun alone would leave them running, so
        # past the timeout it gets SIGTERM, which it passes on to its workers before exiting
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
            try:
                _, stderr = process.communicate(timeout=timeout)
                failure = None if process.returncode == 0 else (stderr.strip().splitlines() or ["no output"])[-1]
            except subprocess.TimeoutExpired:
                failure = f"torchrun over {timeout:g} s"
                process.terminate()
                try:
                    process.communicate(timeout=DDP_STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
        ranks = [torch.load(tmp / f"rank{r}.pt") if (tmp / f"rank{r}.pt").exists() else {} for r in range(DDP_RANKS)]
        table = {}
        for family in families:
            spec = FAMILIES[family]()
            start = dict(spec["build"]().named_parameters())
            for setting in settings:
                got = [r.get((family, setting)) for r in ranks]
                errors = [g for g in got if isinstance(g, str)]
                if errors or any(g is None for g in got):
                    table[family, setting] = "CRASH", errors[0] if errors else f"not run ({failure})"
                    continue
                reference = ddp_state(spec, tmp / f"ref-{family}-{setting}", 1, setting)
                table[family, setting] = compare_states(reference, got, start)
    return table


def compare_states(reference: dict, ranks: list, start: dict):
    """`(outcome, detail)` of the DDP ranks' final states against the single-process `reference`."""
    scale = max(float((reference[name] - p).abs().max()) for name, p in start.items())
    if not scale > 0:
        return "WRONG", "the single-process steps changed no parameter"
    worst, where = 0.0, None
    for r, state in enumerate(ranks):
        if state.keys() != reference.keys():
            return "WRONG", f"rank {r} has other tensors: {sorted(state.keys() ^ reference.keys())[:3]}"
        for name, tensor in reference.items():
            diff = float((state[name].double() - tensor.double()).abs().max()) if tensor.numel() else 0.0
            if diff > worst:
                worst, where = diff, f"rank {r} {name}"
    if worst > DDP_RTOL * scale:
        return "WRONG", f"{where} differs by {worst:.3g} (largest update {scale:.3g})"
    return "ok", f"= 1 process (worst {worst / scale:.1e} of the largest update)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--compile", action="store_true", help="also run torch_compile=True (each family in a subprocess)")
    parser.add_argument("--compile-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="stop a family's compile cell after this long (default: 600)")
    parser.add_argument("--ddp", action="store_true",
                        help="only the DDP columns: two steps on 2 processes (torchrun, gloo) against one process")
    parser.add_argument("--ddp-worker", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    families = [f for f in options.families.split(",") if f]
    settings = [s for s in options.settings.split(",") if s]
    for option, names, known in (("--families", families, FAMILIES),
                                 ("--settings", settings, [*SETTINGS, *DDP_SETTINGS])):
        unknown = [name for name in names if name not in known]
        if unknown:  # a misspelt name would otherwise read as a CRASH of every family
            parser.error(f"{option}: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    if options.ddp_worker:
        return ddp_worker(options.ddp_worker, families, settings)
    if options.ddp:
        settings = [s for s in settings if s in DDP_SETTINGS] or list(DDP_SETTINGS)
        for (family, setting), (outcome, detail) in run_ddp(families, settings).items():
            print(f"{family:21s} {setting:15s} {outcome:9s} {detail}", flush=True)
        return None
    settings = [s for s in settings if s in SETTINGS]
    for family in families:
        for setting in settings:
            outcome, detail = run_cell(family, setting)
            print(f"{family:21s} {setting:15s} {outcome:9s} {detail}", flush=True)
        if options.compile:
            outcome, detail = run_compile(family, options.compile_timeout)
            print(f"{family:21s} {'compile':15s} {outcome:9s} {detail}", flush=True)


if __name__ == "__main__":
    main()
