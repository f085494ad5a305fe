"""Every measured figure a page publishes is its results file's value, as the page rounds it.

Each page below has a function that renders, from the results files the page cites (`benchmarks/results/`,
`checkpoints/*/metrics.json`), the exact text of its figures: a table row, a "median [min–max] (bound)" group, a
baseline. The test asserts each rendered text appears in the page (whitespace-normalised, so line breaks do not
matter). A page figure edited by hand, or a results file re-measured without the page following, fails here,
naming the figure the page should show. (`tests/test_readme.py` checks the README's headline the same way; the
generated tables of `docs/benchmarks.md` come from the files themselves.)"""

import json
import math
import re
import statistics

import pytest

from tests.conftest import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"


def load(name: str):
    """A results file: `name` relative to `benchmarks/results/`, or to the repository root when it starts there."""
    path = REPO_ROOT / name if name.startswith(("checkpoints/", "benchmarks/")) else RESULTS / name
    return json.loads(path.read_text())


def measurement(doc: dict, name: str) -> dict:
    """The harness measurement called `name` (`benchmarks/harness.py`'s schema)."""
    return next(m for m in doc["measurements"] if m["name"] == name)


def f(x: float, digits: int = 2) -> str:
    """`x` with `digits` decimals."""
    return f"{x:.{digits}f}"


def g(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant figures, trailing zeros kept (0.0980, 2.80)."""
    return f"{x:#.{digits}g}".rstrip(".")


def spread(m: dict, fmt=f, sep: str = "–") -> str:
    """`median [min–max]` of a harness measurement."""
    return f"{fmt(m['median'])} [{fmt(m['min'])}{sep}{fmt(m['max'])}]"


def times(m: dict, digits: int = 2, sep: str = "–") -> str:
    """`median x [min–max]` of a harness ratio."""
    return f"{f(m['median'], digits)}x [{f(m['min'], digits)}{sep}{f(m['max'], digits)}]"


def minus(x: float, digits: int = 2) -> str:
    """A signed difference with the typographic minus the pages use."""
    return f"{x:+.{digits}f}".replace("-", "−")


def flat(text: str) -> str:
    return " ".join(text.split())


def missing_figures(page_text: str, expected: list[str]) -> list[str]:
    """The rendered figures that `page_text` does not contain (whitespace-normalised)."""
    text = flat(page_text)
    return [figure for figure in expected if flat(figure) not in text]


PAGES = {}


def page(path: str):
    """Register the function rendering the figures of `path` (relative to the repository root)."""
    def register(function):
        PAGES[path] = function
        return function
    return register


# ------------------------------------------------------------------------------------------------- README, home page
def _kv_headline() -> list[str]:
    kv = load("bench_kv_cache_smollm2.json")
    cold, full = measurement(kv, "composed ttft cold"), measurement(kv, "full ttft")
    ratio = measurement(kv, "ttft speed-up (cold store read)")
    same = kv["extra"]["same_greedy_answer_fraction"]
    return [f"**{f(ratio['median'], 1)}x sooner**", f"FLOP bound {f(ratio['bound']['value'], 1)}x",
            f"({round(kv['extra']['prompt_tokens_mean']):,}-token prompts)",
            f"{kv['settings']['passages']} stored passages", f"medians over {ratio['n']} questions",
            f"({round(same * ratio['n'])} of {ratio['n']})", "`benchmarks/results/bench_kv_cache_smollm2.json`",
            f"{kv['hardware']['torch_threads']} CPU threads of an {kv['hardware']['cpu_model']}",
            f"answering a {kv['extra']['dataset'].capitalize()} question",
            f"{f(cold['median'], 3)} s (range {f(cold['min'], 3)}–{f(cold['max'], 3)} s) against "
            f"{f(full['median'])} s (range {f(full['min'])}–{f(full['max'])} s)"]


@page("README.md")
def readme() -> list[str]:
    metrics = load("checkpoints/deformer-minilm-qa-reference/metrics.json")
    cli = load("cli_vs_api.json")
    encode, answer = measurement(cli, "cli_encode wall"), measurement(cli, "cli_answer wall")
    ratio = measurement(load("bench_kv_cache_smollm2.json"), "ttft speed-up (cold store read)")
    return [*_kv_headline()[:-1], f"(range {f(ratio['min'], 1)}–{f(ratio['max'], 1)}x)",
            f"F1 {f(metrics['cached_f1'], 1)} against {f(metrics['baselines']['always_empty']['f1'], 1)} for always "
            "answering nothing (`checkpoints/deformer-minilm-qa-reference/metrics.json`",
            f"{encode['params']['questions']} questions over {encode['params']['passages']} passages: "
            f"{f(encode['median'])} s and {f(answer['median'])} s per command, medians of {encode['n']} rounds, "
            "`benchmarks/results/cli_vs_api.json`"]


@page("docs/index.md")
def index() -> list[str]:
    kv = load("bench_kv_cache_smollm2.json")
    ratio = measurement(kv, "ttft speed-up (cold store read)")
    return [*_kv_headline(), f"**{f(ratio['median'], 1)}x sooner** [{f(ratio['min'], 1)}–{f(ratio['max'], 1)}x]"]


# ---------------------------------------------------------------------------------------------------- benchmarks
BREAK_EVEN_ROWS = ("deformer", "readonce", "longdoc", "readtwice", "kv_cache")


@page("docs/benchmarks.md")
def benchmarks() -> list[str]:
    doc = load("bench_break_even.json")
    rows = []
    for family in BREAK_EVEN_ROWS:
        encode, stored, fresh, speed, even = (measurement(doc, f"{family}: {name}") for name in (
            "encode+store", "with store", "without store", "per-question speed-up with store",
            "break-even questions per document"))
        rows.append(f"| {spread(encode, g)} | {spread(stored, g)} | {spread(fresh, g)} | {times(speed)} "
                    f"({f(speed['bound']['value'])}x) | **{f(even['median'])}** "
                    f"[{f(even['min'])}–{f(even['max'])}] |")
    sizes = doc["extra"]["store_bytes"]
    rows.append(f"DeFormer {round(sizes['deformer'] / 1024)} KiB, ReadOnce {round(sizes['readonce'] / 1024)} KiB, "
                f"LongDoc {round(sizes['longdoc'] / 1024)} KiB, ReadTwice {round(sizes['readtwice'] / 1024)} KiB, "
                f"KV caches {f(sizes['kv_cache'] / 2 ** 20, 1)} MiB")
    deformer = measurement(doc, "deformer: per-question speed-up with store")
    above = sorted(v for v in deformer["repeats"] if v > deformer["bound"]["value"])
    rows.append(f"in {len(above)} of its {deformer['n']} rounds ({' and '.join(f(v) + 'x' for v in above)} against "
                f"{f(deformer['bound']['value'])}x; median {f(deformer['median'])}x)")
    longdoc = measurement(doc, "longdoc: break-even questions per document")
    rows.append(f"below its 1.00 in one round ({f(longdoc['min'])})")
    return rows


@page("docs/cli.md")
def cli() -> list[str]:
    rows, floors, work = [], [], []
    for name, jobs in (("cli_vs_api.json", ("encode", "answer")), ("cli_vs_api_all_validation.json",
                                                                     ("encode", "answer"))):
        doc = load(name)
        floors.append(measurement(doc, "import_floor wall")["median"])
        for job in jobs:
            api, cli_wall = measurement(doc, f"api_{job} wall"), measurement(doc, f"cli_{job} wall")
            ratio = measurement(doc, f"throughput ratio {job} (API wall / CLI wall)")
            ceiling = measurement(doc, f"ceiling ratio {job} (API wall / (API wall + import floor))")
            work.append(measurement(doc, f"work ratio {job} (API wall / CLI-reported seconds)")["median"])
            rows.append(f"| {f(api['median'])} | {f(cli_wall['median'])} | {times(ratio, sep='-')} | "
                        f"{f(ceiling['median'])}x | `{name}` |")
        passages = api["params"]["passages"]
    first = load("cli_vs_api.json")
    rows.append(f"| encode {measurement(first, 'api_encode wall')['params']['passages']} passages (first "
                f"{first['settings']['questions']} questions) |")
    rows.append(f"| answer all {load('cli_vs_api_all_validation.json')['settings']['questions']:,} questions |")
    rows.append(f"(medians {f(floors[0])} s and {f(floors[1])} s in the two results files)")
    rows.append(f"run at {f(min(work))}-{f(max(work))}x the API's speed")
    rows.append(f"take {f(1 / max(work))}-{f(1 / min(work))}x the API's time")
    assert passages == 271  # every passage of Disfl-QA validation
    return rows


# -------------------------------------------------------------------------------------------------------- DeFormer
@page("docs/models/deformer_bert.md")
def deformer() -> list[str]:
    demo = load("demo/deformer_demo.json")
    row, base = demo["rows"][0], demo["baselines"]
    teacher = load("checkpoints/minilm-qa-reference/metrics.json")["validation"]["disfl_qa"]
    shipped = load("checkpoints/deformer-minilm-qa-reference/metrics.json")
    figures = [
        f"| {f(row['cached_exact_match'])} | **{f(row['cached_f1'])}** | **{f(row['cached_HasAns_f1'])}** | "
        f"{f(row['cached_NoAns_exact'])} |",
        f"(threshold {minus(teacher['null_score_diff_threshold'], 3).lstrip('+')}) | {f(teacher['eval_exact_match'])} | "
        f"{f(teacher['eval_f1'])} | {f(teacher['eval_HasAns_f1'])} | {f(teacher['eval_NoAns_exact'])} |",
        f"(threshold {row['null_score_diff_threshold']:.3f} recorded)",
        *(f"| {f(b['exact_match'])} | {f(b['f1'])} | {f(b['HasAns_f1'])} | {f(b['NoAns_exact'])} |"
          for b in base.values()),
        f"{row['demo_seconds']} s, `benchmarks/results/demo/deformer_demo.json`",
        f"**{f(row['speedup_precomputed'])}x** (rounds {f(row['speedup_precomputed_range'][0])}–"
        f"{f(row['speedup_precomputed_range'][1])}x) with passages precomputed (FLOP ratio "
        f"{f(row['flop_ratio_precomputed'])}x), **{f(row['speedup_including_encoding'])}x** (rounds "
        f"{f(row['speedup_including_encoding_range'][0])}–{f(row['speedup_including_encoding_range'][1])}x) including "
        f"encoding each passage once (FLOP ratio {f(row['flop_ratio_including_encoding'])}x)",
        f"1-minute load average {row['speed_load_average']} after the timing",
        f"printed {f(shipped['speedup_precomputed'])}x / {f(shipped['speedup_including_encoding'])}x",
        f"always-empty + 15 ({f(base['always_empty']['f1'] + 15)}) is missed by "
        f"{f(base['always_empty']['f1'] + 15 - row['cached_f1'])}",
    ]
    bench = load("bench_deformer.json")
    for config, label, fmt in (("bert-base", "bert-base, k = 9", f), ("minilm", "MiniLM, k = 4", g)):
        bert, cached, encode, speed, bert_mem, deformer_mem = (measurement(bench, f"{config}: {name}") for name in (
            "BertForQuestionAnswering", "DeFormer, cached passages", "DeFormer passage encoding (once)",
            "speed-up of cached DeFormer over BERT", "BERT forward extra memory", "DeFormer forward extra memory"))
        change = round(100 * (deformer_mem["median"] / bert_mem["median"] - 1))
        figures += [f"| {label} | {fmt(bert['median'])} s [{fmt(bert['min'])}–{fmt(bert['max'])}] | "
                    f"{fmt(cached['median'])} s [{fmt(cached['min'])}–{fmt(cached['max'])}] | **{f(speed['median'])}x** "
                    f"[{f(speed['min'])}–{f(speed['max'])}] ({f(speed['bound']['value'])}x) | "
                    f"{bert_mem['median']:.0f} → {deformer_mem['median']:.0f} MiB ({change:+d}%) |".replace("(-", "(−"),
                    f"{g(encode['median'])} s [{g(encode['min'])}–{g(encode['max'])}]"]
    quoref = {name: load(f"quoref_table/{name}.json") for name in ("full", "deformer", "deformer_kd")}
    full = quoref["full"]
    figures.append(f"| {f(full['eval_exact_match'])} | {f(full['eval_f1'])} | — |")
    for name, bold in (("deformer", False), ("deformer_kd", True)):
        gap = minus(quoref[name]["cached_f1"] - full["eval_f1"])
        figures.append(f"| {f(quoref[name]['cached_exact_match'])} | {f(quoref[name]['cached_f1'])} | "
                       + (f"**{gap}** |" if bold else f"{gap} |"))
    span, sentence = full["baselines"]["first_span"], full["baselines"]["first_sentence"]
    figures.append(f"| {f(span['exact_match'])} / {f(sentence['exact_match'])} | {f(span['f1'])} / "
                   f"{f(sentence['f1'])} |")
    runs = load("checkpoints/deformer-minilm-qa-reference/train_results.json")
    for stage in runs["stages"][:-1]:
        figures.append(f"| {f(stage['calibration_f1'])} | {f(stage['cached_f1'])} | {f(stage['cached_HasAns_f1'])} | "
                       f"{f(stage['cached_NoAns_exact'])} |")
    fp32 = re.search(r"fp32 validation F1 ([\d.]+), HasAns F1 ([\d.]+)", shipped["note"])
    figures.append(f"| **{f(shipped['calibration_f1'])}** | {fp32[1]} | {fp32[2]} | |")
    return figures



# --------------------------------------------------------------------------------------------------- ReadOnce BART
def _readonce_speed(doc: dict, config: str) -> list[str]:
    def row(label, name, ratio=None):
        m = measurement(doc, f"{config} k=8: {name}")
        text = f"| {label} | {spread(m, g)} |"
        if ratio is not None:
            r = measurement(doc, f"{config} k=8: {ratio}")
            text += f" **{times(r).replace('x [', 'x** [')} ({f(r['bound']['value'])}x) |"
        return text
    return [row("baseline, all 28 questions", "baseline"),
            row("passage encoded once per passage", "amortized", "speed-up amortized"),
            row("representations precomputed", "precomputed", "speed-up precomputed"),
            row("training step, baseline (batch 8)", "train_baseline"),
            row("training step on cached representations", "train_readonce", "training step speed-up")]


@page("docs/models/readonce_bart.md")
def readonce() -> list[str]:
    base, large = load("bench_readonce_bart_base.json"), load("bench_readonce_bart_large.json")
    extra = base["extra"]["rows"][0]
    figures = [*_readonce_speed(base, "bart-base"), *_readonce_speed(large, "bart-large"),
               f"| stage-1 training step (document encoder trained jointly) | "
               f"{spread(measurement(base, 'bart-base k=8: train_stage1'), g)} |",
               f"takes {spread(measurement(base, 'bart-base k=8: train_stage1_hashing'), g).replace(' [', ' s [')}",
               f"baseline {extra['gflops_baseline']:.0f} GFLOP, encoded once per passage {extra['gflops_amortized']:.0f}, "
               f"precomputed {extra['gflops_precomputed']:.0f}",
               f"({f(extra['gflops_train_baseline'], 1)} / {f(extra['gflops_train_readonce'], 1)} GFLOP at bart-base)",
               f"{f(extra['cost_model_speedup_amortized'], 1)}x and {f(extra['cost_model_speedup_precomputed'], 1)}x here"]
    sweep = load("bench_readonce_sweep.json")
    for k in (2, 4, 8, 16):
        amortized, precomputed = (measurement(sweep, f"bart-base k={k}: speed-up {name}")
                                  for name in ("amortized", "precomputed"))
        figures.append(f"| {k} | {times(amortized)} ({f(amortized['bound']['value'])}x) | {times(precomputed)} "
                       f"({f(precomputed['bound']['value'])}x) |")
    baselines = [measurement(sweep, f"bart-base k={k}: baseline")["median"] for k in (2, 4, 8, 16)]
    figures.append(f"baseline {f(min(baselines))}–{f(max(baselines))} s median at every k")
    at_k = load("readonce_k8_disfl_qa_f1.json")
    learning = load("readonce_learning_h100/qa_k8_lr1e-4.json")
    assert all(at_k[k] == learning[f"eval_disfl_qa_k{k}"]["f1"] for k in at_k)  # the plot's F1 is the run's
    for label, name in (("baseline BART (question + passage as text)", "baseline"), ("ReadOnce k = 2", "k2"),
                        ("ReadOnce k = 8", "k8")):
        run = load(f"readonce_learning_h100/qa_{name}_lr1e-4.json")
        figures.append(f"| {label} | {f(run['eval_disfl_qa_exact_match'])} / {f(run['eval_disfl_qa_f1'])} | "
                       f"{f(run['eval_quoref_exact_match'])} / {f(run['eval_quoref_f1'])} | "
                       f"{f(run['eval_disfl_qa_loss'])} / {f(run['eval_quoref_loss'])} | "
                       f"{f(run['stage1_seconds_per_batch'], 3)} |")
        summary = load(f"readonce_learning_h100/xsum_warm_{name}_lr1e-4.json")
        seconds = summary.get("stage1_seconds_per_batch", summary.get("stage2_seconds_per_batch"))
        figures.append(f"| {f(summary['eval_rougeL'])} | {f(summary['eval_loss'], 3)} | {f(seconds, 3)} |")
    gpu = load("reproduce/readonce/h100_qa1500_xsum1000_lr1e-4.json")
    for row in gpu["rows"]:
        qa, xsum = row["qa"], row["xsum"]
        figures.append(f"| {f(qa['disfl_qa']['exact_match'])} / {f(qa['disfl_qa']['f1'])} | "
                       f"{f(qa['quoref']['exact_match'])} / {f(qa['quoref']['f1'])} | {f(xsum['rouge1'])} / "
                       f"{f(xsum['rouge2'])} / {f(xsum['rougeL'])} |")
    lead = gpu["baselines"]["xsum"]
    figures.append(" / ".join(f(lead["lead_1"][k]) for k in ("rouge1", "rouge2", "rougeL")) + "; "
                   + " / ".join(f(lead["lead_3"][k]) for k in ("rouge1", "rouge2", "rougeL")))
    seconds = [row["train_seconds"] for row in gpu["rows"]]
    figures.append(f"each row trained in {min(seconds):.0f}–{max(seconds):.0f} s")
    rouge = {row["row"]: row["xsum"]["rougeL"] for row in gpu["rows"]}
    figures.append(f"by {f(rouge['baseline'] - rouge['k2'], 1)} (k = 2) and {f(rouge['baseline'] - rouge['k8'], 1)} "
                   "(k = 8) ROUGE-L")
    return figures


# ------------------------------------------------------------------------------------------------------- Recurrent
@page("docs/models/recurrent.md")
def recurrent() -> list[str]:
    runs = {name: load(f"austen_table2/{name}.json") for name in (
        "pretrained", "baseline", "recurrent_ov0", "recurrent_ov5", "recurrent_ov30", "recurrent_lr2e-3_ov0",
        "recurrent_lr2e-3_ov5", "recurrent_lr2e-3_ov30")}

    def test_ppl(run, overlap, key="token_perplexity"):
        return run[f"test_persuasion_overlap{overlap}"][key]

    figures = []
    for name in ("pretrained", "baseline"):
        run = runs[name]
        figures.append(f"| {f(run['validation_northangerabbey_overlap0']['token_perplexity'])} (ov. 0) | "
                       + " | ".join(f(test_ppl(run, o)) for o in (0, 5, 30)) + " | "
                       f"{f(test_ppl(run, 0, 'word_perplexity'), 1)} / {f(test_ppl(run, 30, 'word_perplexity'), 1)} |")
    for prefix in ("recurrent_ov", "recurrent_lr2e-3_ov"):
        models = [runs[f"{prefix}{o}"] for o in (0, 5, 30)]
        figures.append(" / ".join(f(m[f"validation_northangerabbey_overlap{o}"]["token_perplexity"])
                                  for m, o in zip(models, (0, 5, 30)))
                       + " | " + " | ".join(f(test_ppl(m, o)) for m, o in zip(models, (0, 5, 30))) + " | "
                       f"{f(test_ppl(models[0], 0, 'word_perplexity'), 1)} / "
                       f"{f(test_ppl(models[2], 30, 'word_perplexity'), 1)} |")
    figures.append("| forward GFLOPs per predicted token | | " + " | ".join(
        f(test_ppl(runs[f"recurrent_ov{o}"], o, "flops_per_token") / 1e9, 3) for o in (0, 5, 30)) + " | |")
    extra = max(test_ppl(runs[f"recurrent_ov{o}"], o, "flops_per_token")
                / test_ppl(runs["baseline"], o, "flops_per_token") for o in (0, 5, 30)) - 1
    figures.append(f"add {f(100 * extra, 3)}% per token")
    figures.append(f"from {f(test_ppl(runs['recurrent_ov0'], 0))} to "
                   f"{f(test_ppl(runs['recurrent_ov0'], 0, 'token_perplexity_recurrence_zeroed'))} (overlap 0), "
                   f"{f(test_ppl(runs['recurrent_ov5'], 5))} to "
                   f"{f(test_ppl(runs['recurrent_ov5'], 5, 'token_perplexity_recurrence_zeroed'))} (5) and "
                   f"{f(test_ppl(runs['recurrent_ov30'], 30))} to "
                   f"{f(test_ppl(runs['recurrent_ov30'], 30, 'token_perplexity_recurrence_zeroed'))} (30)")
    gpu = load("reproduce/recurrent_table2/h100_budget300.json")
    recurrent0 = [r for r in gpu["rows"] if r["recurrent"] and r["test_overlap"] == 0]
    baseline = {r["test_overlap"]: r for r in gpu["rows"] if not r["recurrent"]}
    scored = [r for r in gpu["rows"] if r["recurrent"] and r["test_token_perplexity"] is not None]
    cost = [r["test_token_perplexity_recurrence_zeroed"] - r["test_token_perplexity"] for r in scored]
    steps = [r["train_steps"] for r in gpu["rows"] if r["recurrent"]]
    figures.append(f"scored {f(min(r['test_token_perplexity'] for r in recurrent0))}-"
                   f"{f(max(r['test_token_perplexity'] for r in recurrent0))} against the baseline's "
                   f"{f(baseline[30]['test_token_perplexity'])} at overlap 30 and "
                   f"{f(baseline[0]['test_token_perplexity'])} at overlap 0, and zeroing its recurrence cost "
                   f"{f(min(cost))}-{f(max(cost))}")
    figures.append(f"it made {min(steps)}-{max(steps)} steps and the baseline {baseline[0]['train_steps']:,}")
    memory = load("bench_recurrent_memory.json")
    one, twenty = (measurement(memory, f"train peak at {n} windows")["median"] for n in (1, 20))
    short, long = (measurement(memory, f"eval peak at {n} tokens")["median"] for n in (4096, 40960))
    figures.append(f"peaks at {twenty:,.0f} MiB against {one:,.0f} MiB for one window, "
                   f"**{f(measurement(memory, 'train peak ratio 20 / 1')['median'], 3)}x**")
    figures.append(f"at {long:,.0f} MiB against {short:,.0f} MiB on 4,096, "
                   f"{f(measurement(memory, 'eval peak ratio 40960 / 4096')['median'], 3)}x")
    gpt2 = load("bench_recurrent_memory_gpt2.json")
    for windows, tokens in ((1, 300), (5, 1500), (20, 6000)):
        peaks = []
        for allocator in ("freed blocks returned", "glibc defaults"):
            peak = measurement(gpt2, f"training peak resident, {allocator}, {windows} windows")["median"]
            first = measurement(gpt2, f"training peak resident, {allocator}, 1 windows")["median"]
            ratio = f(peak / first)
            peaks.append(f"{peak:,.0f} MiB" if windows == 1 else
                         f"{peak:,.0f} MiB (" + (f"**{ratio}x**" if windows == 20 and allocator[0] == "f" else
                                                 f"{ratio}x") + ")")
        figures.append(f"| {windows} ({tokens:,}) | {peaks[0]} | {peaks[1]} |")
    throughput = load("bench_recurrent_throughput.json")
    figures.append(f"2 threads of an {throughput['hardware']['cpu_model']} shared with other jobs (load about 3")
    assert "shared with other jobs (load about 3" in throughput["hardware"]["note"]  # the condition the page states
    for label, name, ratio in (("window by window", "plain_sequential", True), ("windows batched", "plain_batched", True),
                               ("recurrent", "recurrent", False)):
        m = measurement(throughput, f"inference: {name}")
        text = f"{label} | {spread(m, lambda x: f(x, 1))} | {6000 / m['median']:.0f} |"
        if ratio:
            r = measurement(throughput, f"inference: recurrent time / {name} time")
            shown = times(r)
            text += f" {'**' + shown.replace('x [', 'x** [') if name == 'plain_sequential' else shown} |"
        figures.append(text)
    return figures



# -------------------------------------------------------------------------------------------------------- ReadTwice
READTWICE_ROWS = ("baseline", "cls", "sts", "e", "e_ss", "e_ro")
READTWICE_RUNS = ("h100_3epochs_budget230", "h200_3epochs_seed42", "h200_3epochs_seed1")


@page("docs/models/readtwice_bert.md")
def readtwice() -> list[str]:
    doc = load("bench_readtwice.json")
    speed, once = doc["extra"]["speed"], doc["extra"]["read_once"]
    forward = [measurement(doc, f"forward: {name}") for name in ("readtwice", "bert")]
    train = [measurement(doc, f"train_step: {name}") for name in ("readtwice", "bert")]
    stored, recomputed, paper = (measurement(doc, f"read once: 7 questions, {name}")
                                 for name in ("stored", "recomputed", "paper_setup"))
    ratio = measurement(doc, "read once: recomputed time / stored time")
    figures = [
        f"({f(speed['gflops_readtwice'], 1)} against {f(speed['gflops_bert'], 1)} GFLOP: {f(speed['flop_ratio'])}x;",
        f"Parameters **{f(speed['param_ratio'])}x** BERT's ({f(speed['params_readtwice'] / 1e6, 1)}M against "
        f"{f(speed['params_bert'] / 1e6, 1)}M",
        f"Forward {spread(forward[0]).replace(' [', ' s [')} against {spread(forward[1]).replace(' [', ' s [')}: "
        f"**{times(measurement(doc, 'forward: readtwice time / bert time')).replace('x [', 'x** [')}",
        f"{spread(train[0], g).replace(' [', ' s [')} against {spread(train[1], g).replace(' [', ' s [')}: "
        f"**{times(measurement(doc, 'train_step: readtwice time / bert time')).replace('x [', 'x** [')}",
        f"{spread(stored, g).replace(' [', ' s [')} with the first read and memory table encoded once and stored "
        f"({f(once['questions_per_s_stored'])} questions/s), {spread(recomputed, g).replace(' [', ' s [')} recomputing "
        f"them per question ({f(once['questions_per_s_recomputed'])} questions/s): "
        f"**{times(ratio).replace('x [', 'x** [')}, FLOP bound {f(ratio['bound']['value'])}x "
        f"({once['gflops_recomputed']:,.0f} against {once['gflops_stored']:,.0f} GFLOP",
        f"segment, {spread(paper, g).replace(' [', ' s [')}",
        f"{speed['mentions_per_segment']} synthetic mentions per segment and top-k {speed['memory_top_k']}",
    ]
    austen_doc = load("bench_readtwice_austen.json")
    assert "shared with other jobs (load about 3" in austen_doc["hardware"]["note"]  # the condition the page states
    figures.append(f"2 threads of an {austen_doc['hardware']['cpu_model']} shared with other jobs (load about 3")
    austen = austen_doc["extra"]["austen"]
    whole, one = austen["whole_novel"], austen["one_subdocument"]
    figures.append(f"Emma is {whole['segments']} segments")
    figures.append(f"({whole['subdocuments_run']} sub-documents, {whole['seconds']:.0f} s) is "
                   f"{whole['peak_rss_mib']:,.0f} MiB against {one['peak_rss_mib']:,.0f} MiB for one sub-document "
                   f"({one['seconds']:.0f} s): **{f(austen['peak_ratio_whole_over_one'])}x**")
    cpu = {name: load(f"readtwice_table/{name}.json") for name in READTWICE_ROWS}
    base = cpu["baseline"]
    for name in READTWICE_ROWS:
        row = cpu[name]
        gap = "—" if name == "baseline" else minus(row["eval_f1"] - base["eval_f1"])
        figures.append(f"| {f(row['eval_exact_match'])} | {f(row['eval_f1'])} | {gap} | {row['train_runtime']:.0f} |")
    figures.append(" / ".join(f(base[f"{b}_baseline_exact_match"]) for b in ("first_span", "first_sentence",
                                                                           "first_mention")) + " | "
                   + " / ".join(f(base[f"{b}_baseline_f1"]) for b in ("first_span", "first_sentence", "first_mention")))
    runs = [{row["row"]: row for row in load(f"reproduce/readtwice_quoref/{name}.json")["rows"]}
            for name in READTWICE_RUNS]
    for name in READTWICE_ROWS:
        scores = [run[name]["f1"] for run in runs]
        shown = [f(s) + (f" ({runs[0][name]['train_steps']:,} steps)" if i == 0 and name == "e_ro" else "")
                 for i, s in enumerate(scores)]
        figures.append(f"| {' | '.join(shown)} | {f(min(scores))}–{f(max(scores))} |")
    h200 = [{**run, **load(f"reproduce/readtwice_quoref/{name}.json")} for run, name in zip(runs[1:], READTWICE_RUNS[1:])]
    rows = [row for run in h200 for key, row in run.items() if key in READTWICE_ROWS]
    plain = [row["train_seconds"] for row in rows if row["row"] != "e_ro"]
    once = [row["train_seconds"] for row in rows if row["row"] == "e_ro"]
    figures.append(f"(H200: {min(plain):.0f}–{max(plain):.0f} s per row, {min(once):.0f}–{max(once):.0f} s for read-once; "
                   f"the whole command {h200[0]['wall_seconds']:.0f} s and {h200[1]['wall_seconds']:.0f} s)")
    gaps = [run["baseline"]["f1"] - run["e_ro"]["f1"] for run in runs]
    figures.append(f"{f(min(gaps), 1)}–{f(max(gaps), 1)} F1 below the baseline")
    e_gaps = [minus(run["e"]["f1"] - run["baseline"]["f1"]) for run in runs]
    figures.append(f"(+{f(runs[0]['e']['f1'] - runs[0]['baseline']['f1'])}) and below it in two ({e_gaps[1]}, "
                   f"{e_gaps[2]})")
    figures.append(f"moves {f(runs[1]['baseline']['f1'] - runs[0]['baseline']['f1'])} F1 between the two seed-42 runs")
    return figures


# --------------------------------------------------------------------------------------------------------- LongDoc
def _longdoc_row(doc: dict, length: int, kind: str, label: str, fmt, peak: bool = True, bold: bool = True,
                 bound_note: str = "") -> str:
    time = measurement(doc, f"forward {kind} @{length}")
    text = f"| {label} | {fmt(time['median'])} [{fmt(time['min'])}–{fmt(time['max'])}] | "
    if kind == "full":
        text += "1 | |"
    else:
        ratio = measurement(doc, f"forward {kind} / full @{length}")
        shown = times(ratio)
        text += (f"**{shown.replace('x [', 'x** [')}" if bold else shown) + f" | {f(ratio['bound']['value'])}x{bound_note} |"
    if peak:
        text += f" {f(measurement(doc, f'forward peak {kind} @{length}')['median'], 1)} |"
    return text


@page("docs/models/longdoc_bart.md")
def longdoc() -> list[str]:
    run2, loaded4k = load("bench_longdoc_forward_4k_run2.json"), load("bench_longdoc_forward_4k.json")
    quiet4k, loaded16k = load("bench_longdoc_forward_4k_quiet.json"), load("bench_longdoc_forward_16k.json")
    quiet16k, led = load("bench_longdoc_forward_16k_quiet.json"), load("bench_longdoc_forward_4k_led.json")
    one = lambda x: f(x, 1)  # noqa: E731
    figures = [_longdoc_row(run2, 4096, kind, label, f, peak=False) for kind, label in (
        ("full", "full attention (SDPA, baseline)"), ("neighborhood", "neighborhood, r = 100"),
        ("convolutional", "convolutional, kernel 3, stride 3"))]
    figures.append(f"gave {times(measurement(loaded4k, 'forward neighborhood / full @4096'))} and "
                   f"{times(measurement(loaded4k, 'forward convolutional / full @4096'))}")
    kernel = re.search(r"kernel bound ([\d.]+)x", measurement(quiet4k, "forward neighborhood / full @4096")["bound"][
        "derivation"])[1]
    for kind, label, fmt, note in (("full", "full attention (SDPA, baseline)", g, ""),
                                   ("neighborhood", "neighborhood, r = 100", g, f" (kernel {f(float(kernel))}x)"),
                                   ("convolutional", "convolutional, kernel 3, stride 3", g, "")):
        figures.append(_longdoc_row(quiet4k, 4096, kind, label, fmt, bound_note=note))
    for doc in (loaded16k, quiet16k):
        for kind, label, fmt in (("full", "full attention (SDPA, baseline)", one),
                                 ("neighborhood", "neighborhood, r = 100", g),
                                 ("convolutional", "convolutional, kernel 3, stride 3", g)):
            figures.append(_longdoc_row(doc, 16384, kind, label, fmt if doc is loaded16k or kind != "full" else g))
    full_quiet = measurement(quiet4k, "forward full @4096")["median"]
    figures.append(f"forward takes {f(full_quiet)} s ({measurement(run2, 'forward full @4096')['median'] / full_quiet:.0f}x "
                   "less than in the loaded 7-round run")
    share = {kind: measurement(quiet4k if length == 4096 else quiet16k, f"forward {kind} / full @{length}")
             for kind, length in (("neighborhood", 4096), ("convolutional", 16384))}
    figures.append(f"reaches {100 * share['neighborhood']['median'] / share['neighborhood']['bound']['value']:.0f} % "
                   "of its FLOP bound here")
    n16 = measurement(quiet16k, "forward neighborhood / full @16384")
    figures.append(f"neighborhood reaches {100 * n16['median'] / n16['bound']['value']:.0f} % of its FLOP bound and "
                   f"convolutional {100 * share['convolutional']['median'] / share['convolutional']['bound']['value']:.0f} %")
    slower = [measurement(loaded16k, f"forward {k} @16384")["median"]
              / measurement(quiet16k, f"forward {k} @16384")["median"] for k in ("full", "neighborhood", "convolutional")]
    figures.append(f"({slower[0]:.0f}x slower there against {slower[1]:.0f}x and {slower[2]:.0f}x)")
    memory = load("bench_longdoc_memory_16k.json")
    figures.append("agrees: " + ", ".join(f"{k} {f(measurement(memory, f'forward peak {k} @16384')['median'], 1)}"
                                          for k in ("full", "neighborhood", "convolutional")) + " MiB")
    legacy = next(r for r in load("legacy/bench_longdoc.json")["results"]
                  if r["name"] == "convolutional" and r["length"] == 16384)
    figures.append(f"peak at 16k was {legacy['forward_peak_mib']:,.0f} MiB")
    figures += [_longdoc_row(led, 4096, kind, label, g, bold=kind == "neighborhood") for kind, label in (
        ("full", "full attention (SDPA, baseline)"), ("neighborhood", "neighborhood, r = 100"),
        ("led", "LED, `attention_window` 200 (r = 100 each side)"))]
    train = load("bench_longdoc_train_4k.json")
    times_ = {k: measurement(train, f"train {k} @4096") for k in ("full", "neighborhood", "convolutional")}
    ratios = {k: measurement(train, f"train {k} / full @4096") for k in ("neighborhood", "convolutional")}
    figures.append(f"full {spread(times_['full']).replace(' [', ' s [')}; neighborhood "
                   f"{spread(times_['neighborhood']).replace(' [', ' s [')}, "
                   f"**{times(ratios['neighborhood']).replace('x [', 'x** [')} (FLOP bound "
                   f"{f(ratios['neighborhood']['bound']['value'])}x); convolutional "
                   f"{spread(times_['convolutional']).replace(' [', ' s [')}, {times(ratios['convolutional'])} (bound "
                   f"{f(ratios['convolutional']['bound']['value'])}x); training peaks " + " / ".join(
                       f"{measurement(train, f'train peak {k} @4096')['median']:.0f}" for k in times_) + " MiB")
    figures.append(f"forward: neighborhood {times(measurement(train, 'forward neighborhood / full @4096'))}, "
                   f"convolutional {times(measurement(train, 'forward convolutional / full @4096'))}")
    sweep = load("bench_longdoc_sweep_4k.json")

    def swept(kind, value):
        m = measurement(sweep, f"forward {kind} / full @4096")
        return f"{value}: {times(m)} ({f(m['bound']['value'])}x)"
    figures += ["r = " + "; ".join(swept(k, v) for k, v in (("neighborhood:r=25", 25), ("neighborhood:r=50", 50),
                                                          ("neighborhood", 100), ("neighborhood:r=200", 200),
                                                          ("neighborhood:r=400", 400))),
                "r = " + "; ".join(swept(k, v) for k, v in (("led:r=50", 50), ("led", 100), ("led:r=200", 200))),
                "| " + "; ".join(swept(k, v) for k, v in (("convolutional:k=2:s=2", 2), ("convolutional", 3),
                                                         ("convolutional:k=5:s=5", 5), ("convolutional:k=8:s=8", 8))),
                "| " + "; ".join(swept(k, v) for k, v in (
                    ("convolutional_per_head:k=2:s=2", 2), ("convolutional_per_head", 3),
                    ("convolutional_per_head:k=5:s=5", 5), ("convolutional_per_head:k=8:s=8", 8)))]
    r100 = [measurement(doc, "forward neighborhood / full @4096")["median"] for doc in (quiet4k, led, train, sweep)]
    figures.append(f"lies between {f(min(r100))}x and {f(max(r100))}x")
    reuse = load("bench_longdoc_reuse.json")
    encode, fill, stored = (measurement(reuse, name) for name in (
        "re-encode every summary", "store fill (once)", "summaries from the store"))
    speed = measurement(reuse, "speed-up of the summaries (re-encode / reuse)")
    with_fill = measurement(reuse, "speed-up with the fill counted (re-encode / (fill + reuse))")
    figures.append(f"{spread(encode, lambda x: f(x, 1)).replace(' [', ' s [')}; filling the store once "
                   f"{spread(fill).replace(' [', ' s [')}; all summaries from the store "
                   f"{spread(stored, lambda x: f(x, 1)).replace(' [', ' s [')}: "
                   f"**{times(speed).replace('x [', 'x** [')} (FLOP bound {f(speed['bound']['value'])}x), "
                   f"{times(with_fill)} with the fill counted (bound {f(with_fill['bound']['value'])}x)")
    figures.append(f"token-for-token identical on both paths ({reuse['extra']['identical_summaries']})")
    figures.append(f"The bound counts {reuse['extra']['encoder_gflops_per_document']:.0f} GFLOP for one encoding")
    figures.append(f"and {reuse['extra']['decoder_gflops_per_document']:.0f} GFLOP for the four summaries' decoding")
    before = load("legacy/bench_longdoc_reuse.json")  # its decoder count left out the projections the page names
    figures.append(f"without them the bound is {f(before['flop_bound_summaries'])}x in a run before the harness, "
                   "`legacy/bench_longdoc_reuse.json`")
    for kind in ("full", "neighborhood", "convolutional", "convolutional_per_head"):
        row = load(f"xsum_table/{kind}.json")
        figures.append(f"| {f(row['eval_rouge1'])} | {f(row['eval_rouge2'])} | {f(row['eval_rougeL'])} | "
                       f"{row['eval_perplexity']:,.2f} | {row['train_document_tokens_per_second']:.0f} |")
    lead = load("xsum_table/full.json")["eval_baselines"]
    figures += [f"| *baseline: {name.replace('_', '-')}* | " + " | ".join(f(lead[name][k]) for k in (
        "rouge1", "rouge2", "rougeL")) + " |" for name in ("lead_1", "lead_3")]
    return figures



# ------------------------------------------------------------------------------------------------- Block attention
def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / name).read_text().splitlines() if line.strip()]


def _chat_row(dataset: str, path: str, row: dict, with_speed: bool = True) -> str:
    text = (f"| {dataset} ({row['questions']}) | {path} | {f(row['em'], 1)} | {f(row['f1'], 1)} | "
            f"{f(row['agreement_em'], 1)} | {f(row['agreement_f1'], 1)} | {f(row['ttft_median_s'])} |")
    if with_speed:
        text += f" {f(row['ttft_speedup_median'])}x | {f(row['ttft_flop_bound_median'])}x |"
    return text


@page("docs/models/block_attention_llama.md")
def block_attention() -> list[str]:
    kv = load("bench_kv_cache_smollm2.json")
    m = {x["name"]: x for x in kv["measurements"]}
    three = lambda x: f(x, 3)  # noqa: E731
    percent = lambda x: f(100 * x, 1)  # noqa: E731
    cold, warm = m["ttft speed-up (cold store read)"], m["ttft speed-up (warm store read)"]
    total = m["total answer speed-up (warm store read)"]
    figures = [
        f"| time to first token, cold store read | {f(m['full ttft']['median'])} s [{f(m['full ttft']['min'])}–"
        f"{f(m['full ttft']['max'])} s] | {three(m['composed ttft cold']['median'])} s "
        f"[{three(m['composed ttft cold']['min'])}–{three(m['composed ttft cold']['max'])} s] | "
        f"**{f(cold['median'], 1)}x [{f(cold['min'], 1)}–{f(cold['max'], 1)}x]** | {f(cold['bound']['value'], 1)}x |",
        f"| {three(m['composed ttft warm']['median'])} s [{three(m['composed ttft warm']['min'])}–"
        f"{three(m['composed ttft warm']['max'])} s] | **{f(warm['median'], 1)}x [{f(warm['min'], 1)}–"
        f"{f(warm['max'], 1)}x]** | {f(warm['bound']['value'], 1)}x |",
        f"cold {three(m['read cold']['median'])} s [{three(m['read cold']['min'])}–{three(m['read cold']['max'])} s], "
        f"warm {three(m['read warm']['median'])} s [{three(m['read warm']['min'])}–{three(m['read warm']['max'])} s] | "
        + " ".join(f"{name} {percent(m[f'read share of composed ttft ({name})']['median'])}% "
                   f"[{percent(m[f'read share of composed ttft ({name})']['min'])}–"
                   f"{percent(m[f'read share of composed ttft ({name})']['max'])}%]," for name in ("cold", "warm"))[:-1]
        + f" | {f(m['read share of composed ttft (cold)']['bound']['value'] / 1e6, 1)} MB read per question |",
        f"| {f(m['full total']['median'])} s [{f(m['full total']['min'])}–{f(m['full total']['max'])} s] | "
        f"{three(m['composed total']['median'])} s [{three(m['composed total']['min'])}–"
        f"{three(m['composed total']['max'])} s] | {f(total['median'])}x [{f(total['min'])}–{f(total['max'])}x] | "
        f"{f(total['bound']['value'], 1)}x |",
        f"{f(m['recompute / load bfloat16 cold']['median'], 1)}x [{f(m['recompute / load bfloat16 cold']['min'], 1)}–"
        f"{f(m['recompute / load bfloat16 cold']['max'], 1)}x]; " + " / ".join(
            f"{f(m[f'recompute / load {d} warm']['median'], 1)}x" for d in ("float32", "bfloat16", "float16")),
        f"fp32 {f(kv['extra']['store_bytes_per_1000_tokens']['float32'] / 2 ** 20)} MiB, bf16 and fp16 "
        f"{f(kv['extra']['store_bytes_per_1000_tokens']['bfloat16'] / 2 ** 20)} MiB (KV numbers alone "
        f"{f(kv['extra']['bounds']['kv_numbers_per_token'] * 2 * 1000 / 2 ** 20)})",
        f"the same greedy answer for {kv['extra']['same_greedy_answer_fraction']:.0%} of the questions",
        f"prompts of {round(kv['extra']['prompt_tokens_mean']):,} tokens of which "
        f"{round(kv['extra']['question_tokens_mean'])} are the question",
    ]
    qa = {name: load(f"block_attention_qa_h100/eval_{name}.json") for name in (
        "full_full", "full_stored", "block_stored", "block_full")}
    reference = qa["full_full"]["eval_full_f1"]
    for name, bold in (("full_full", False), ("full_stored", False), ("block_stored", True), ("block_full", False)):
        mode = name.split("_")[1]
        em, f1 = qa[name][f"eval_{mode}_exact_match"], qa[name][f"eval_{mode}_f1"]
        gap = "—" if name == "full_full" else minus(f1 - reference)
        figures.append(f"| {f(em)} | " + (f"**{f(f1)}** | **{gap}**" if bold else f"{f(f1)} | {gap}"))
    base = qa["full_full"]
    figures.append(f"| {f(base['always-empty_baseline_exact_match'])} | {f(base['always-empty_baseline_f1'])} |")
    figures.append(f"| {f(base['first-span_baseline_exact_match'])} | {f(base['first-span_baseline_f1'])} |")
    train = {name: load(f"block_attention_qa_h100/train_{name}.json") for name in ("full", "block")}
    figures.append(f"{100 * qa['block_stored']['eval_answer_kept_fraction']:.1f}% of the validation questions")
    figures.append(f"Train loss {f(train['full']['train_loss'], 3)} (full) / {f(train['block']['train_loss'], 3)} (block); "
                   f"{train['full']['train_runtime']:.0f} / {train['block']['train_runtime']:.0f} s")
    figures.append(f"({f(train['block']['epoch'])} epochs")
    figures.append("gave " + " / ".join(f(train[row][f"eval_{mode}_f1"]) for row, mode in (
        ("full", "full"), ("full", "stored"), ("block", "stored"), ("block", "full"))) + " F1 for the four rows")
    chat = load("selective_recompute/chat_answer.json")["datasets"]
    for dataset, rows in chat.items():
        for path, row in rows["paths"].items():
            figures.append(_chat_row(dataset, path, row))
            same = row.get("same_questions")
            if same:
                figures.append(f"| {dataset} ({row['questions']}) | full, same questions as {path} | "
                               f"{f(same['full']['exact_match'], 1)} | {f(same['full']['f1'], 1)} | | | "
                               f"{f(same['full_ttft_median_s'])} |")
                for b in ("always_empty", "first_span"):
                    figures.append(f"| {dataset} ({row['questions']}) | baseline: {b}, same questions as {path} | "
                                   f"{f(same[b]['exact_match'], 1)} | {f(same[b]['f1'], 1)} |")
        for b, value in rows["baselines"].items():
            figures.append(f"| {dataset} ({rows['questions']}) | baseline: {b} | {f(value['exact_match'], 1)} | "
                           f"{f(value['f1'], 1)} |")
    streamed = load("selective_recompute/chat_answer_streamed.json")["datasets"]
    for dataset, rows in streamed.items():
        lines = [r for r in _jsonl(f"selective_recompute/chat_answer_streamed_{dataset}.jsonl") if "paths" in r]
        before = {r["id"]: r for r in _jsonl(f"selective_recompute/chat_answer_{dataset}.jsonl") if "paths" in r}
        for path, row in rows["paths"].items():
            ratios = [r["paths"]["full"]["ttft"] / r["paths"][path]["ttft"] for r in lines if path in r["paths"]]
            if path == "full":
                earlier = statistics.median(before[r["id"]]["paths"]["full"]["ttft"] for r in lines)
                figures.append(f"| {dataset} ({row['questions']}) | full | {f(row['ttft_median_s'])} | 1.00x | 1.00x | "
                               f"{f(earlier)} s |")
                continue
            middle = statistics.median(before[r["id"]]["paths"]["full"]["ttft"] / before[r["id"]]["paths"][path]["ttft"]
                                       for r in lines if path in r["paths"])
            speed = f"{f(row['ttft_speedup_median'])}x [{f(min(ratios))}–{f(max(ratios))}]"
            figures.append(f"| {dataset} ({row['questions']}) | {path} | {f(row['ttft_median_s'])} | "
                           + (f"**{speed.replace('x [', 'x** [')}" if path == "r=0.15" else speed)
                           + f" | {f(row['ttft_flop_bound_median'])}x | {f(middle)}x |")
    for name, label in (("chat_memory_before_streaming", "composition built whole, then copied into the cache"),
                        ("chat_memory", "layer by layer, streamed into the cache")):
        peaks = [r["paths"] for r in _jsonl(f"selective_recompute/{name}.jsonl") if "paths" in r]
        cells = [" / ".join(f(p[path]["peak_rss_growth_mb"], 1) for p in peaks)
                 for path in ("full", "r=0", "r=0.05", "r=0.15", "r=0.3", "r=1")]
        figures.append(f"| {label} | {cells[0]} MiB | {' | '.join(cells[1:])} | `{name}.jsonl` |")
    for name in ("chat_memory_5q", "chat_memory_5q_before_streaming"):  # 5 questions per dataset: median [max]
        rows = [r for r in _jsonl(f"selective_recompute/{name}.jsonl") if "paths" in r]
        for path, label in (("full", "full prompt" if name == "chat_memory_5q" else "full"), ("r=0", "r=0"),
                            ("r=0.15", "r=0.15"), ("r=1", "r=1")):
            cells = []
            for prefix in ("disflqa-", "quoref-"):
                peaks = [r["paths"][path]["peak_rss_growth_mb"] for r in rows if r["id"].startswith(prefix)]
                cells.append(f"{f(statistics.median(peaks), 1)} [{f(max(peaks), 1)}]")
            figures.append(f"{label} {' / '.join(cells)}")
    alone = load("selective_recompute/chat_answer.json")["datasets"]
    after = load("selective_recompute/chat_answer_after_prefix.json")["datasets"]
    for dataset, label in (("disfl_qa", "Disfl-QA"), ("quoref", "Quoref")):
        for path, ratio in (("r=0", "0"), ("r=0.15", "0.15")):
            a, b = alone[dataset]["paths"][path], after[dataset]["paths"][path]
            figures.append(f"| {label} | {ratio} | {f(a['agreement_em'], 1)} / {f(a['agreement_f1'], 1)} | "
                           f"{f(b['agreement_em'], 1)} / {f(b['agreement_f1'], 1)} |")
    gains = [(after[d]["paths"]["r=0"]["agreement_f1"] - alone[d]["paths"]["r=0"]["agreement_f1"],
              after[d]["paths"]["r=0"]["agreement_em"] - alone[d]["paths"]["r=0"]["agreement_em"])
             for d in ("disfl_qa", "quoref")]
    figures.append(f"(+{f(gains[0][0], 1)} / +{f(gains[1][0], 1)} F1 and +{f(gains[0][1], 1)} / +{f(gains[1][1], 1)} EM "
                   "at ratio 0)")
    for name in ("first_newline", "text_answer"):  # the raw-prompt runs 1 and 2
        for dataset, rows in load(f"selective_recompute/{name}.json")["datasets"].items():
            figures += [_chat_row(dataset, path, row) for path, row in rows["paths"].items()]
            figures += [f"| {dataset} ({rows['questions']}) | baseline: {b} | {f(value['exact_match'], 1)} | "
                        f"{f(value['f1'], 1)} |" for b, value in rows["baselines"].items()]
    for name, label in (("memory_before_compose_fix", "before (concatenation + padded copy)"),
                        ("memory_per_layer", "one copy, one tensor per layer"),
                        ("memory_views", "+ `split()` views (final)")):
        peaks = [r["paths"] for r in _jsonl(f"selective_recompute/{name}.jsonl") if "paths" in r]
        cells = [" / ".join(f(p[path]["peak_rss_growth_mb"], 1) for p in peaks)
                 for path in ("full", "r=0", "r=0.05", "r=0.15", "r=0.3", "r=1")]
        figures.append(f"| {label} | {cells[0]}{' MiB' if name.endswith('fix') else ''} | {' | '.join(cells[1:])} | "
                       f"`{name}.jsonl` |")
    oracle = {r: load(f"selective_recompute/oracle_after_prefix_r{r}.json")["rules"] for r in ("0.15", "0.3", "0.5")}
    for ratio, rules in oracle.items():
        cells = [f"{f(rules[rule][d]['agreement_em'], 1)} / {f(rules[rule][d]['agreement_f1'], 1)}"
                 for d in ("disfl_qa", "quoref") for rule in ("library", "oracle")]
        figures.append(f"| {ratio} | {f(rules['library']['disfl_qa']['flop_fraction_mean'], 3)} | {' | '.join(cells)} |")
    rounding = load("selective_recompute/rounding_bf16_store.json")["datasets"]
    shown = {d: {p: f"{f(rounding[d]['paths'][p]['agreement_em'], 1)} / {f(rounding[d]['paths'][p]['agreement_f1'], 1)}"
                 for p in ("full@bf16", "full@fp16", "r=0.15")} for d in rounding}
    figures.append(f"Disfl-QA bf16 EM {shown['disfl_qa']['full@bf16'].replace(' / ', ' / F1 ')}, fp16 "
                   f"{shown['disfl_qa']['full@fp16']}; Quoref bf16 {shown['quoref']['full@bf16']}, fp16 "
                   f"{shown['quoref']['full@fp16']}")
    figures.append(f"agreement EM / F1 {shown['disfl_qa']['r=0.15']} (Disfl-QA) and {shown['quoref']['r=0.15']} (Quoref)")
    return figures + _selection_rules() + _recompute_prose() + _store_reader_pair()


def _store_reader_pair() -> list[str]:
    """The two readers' run of `bench_kv_cache.py`, one after the other (`benchmarks/results/store_reader/`)."""
    old, new = ({x["name"]: x for x in load(f"store_reader/{name}.json")["measurements"]}
                for name in ("mmap_reader", "pread_reader"))
    ms = lambda x: f(1000 * x, 1)  # noqa: E731
    percent = lambda x: f(100 * x, 1)  # noqa: E731
    return [f"warm read {ms(old['read warm']['median'])} → {ms(new['read warm']['median'])} ms and its share of the "
            f"composed TTFT {percent(old['read share of composed ttft (warm)']['median'])}% → "
            f"{percent(new['read share of composed ttft (warm)']['median'])}% (cold "
            f"{percent(old['read share of composed ttft (cold)']['median'])}% → "
            f"{percent(new['read share of composed ttft (cold)']['median'])}%); TTFT speed-up warm "
            f"{f(old['ttft speed-up (warm store read)']['median'])}x → "
            f"{f(new['ttft speed-up (warm store read)']['median'])}x, cold "
            f"{f(old['ttft speed-up (cold store read)']['median'])}x → "
            f"{f(new['ttft speed-up (cold store read)']['median'])}x"]


def _agreement(rows: list[dict], answer) -> dict:
    """Agreement EM / F1 of `answer(row)` with the full prompt's answer over `rows` (`squad_em_f1`, as the
    benchmarks score it)."""
    from hf_readonce.tasks.question_answering import squad_em_f1

    reference = [{"id": str(i), "answers": {"text": [r["full"]], "answer_start": [0]}} for i, r in enumerate(rows)]
    return squad_em_f1({str(i): answer(r) for i, r in enumerate(rows)}, reference)


def _selection_rules() -> list[str]:
    """The selection-rule table (`selection_rules_r0.15_{a,b,c}.jsonl`, 40 questions per dataset at ratio 0.15):
    agreement per rule, its FLOP fraction, and how many questions it answers better / worse than `base` by F1."""
    rows = {}
    for part in "abc":
        for r in _jsonl(f"selective_recompute/selection_rules_r0.15_{part}.jsonl"):
            row = rows.setdefault((r["dataset"], r["id"]), {"dataset": r["dataset"], "flops": {}})
            row.update(r["answers"])
            row["flops"].update(r["flop_fraction"])
    labels = {"flat": "flat (= fixed set from layer 1)", "base": "base (library)"}
    figures, f1 = [], {}
    for rule in ("base", "kv", "k", "sink4", "sink16", "flat", "rank_l1", "steep", "kv_sink4", "kv_flat",
                 "kv_rank_l1", "kv_steep"):
        cells, moved = [], []
        for dataset in ("disfl_qa", "quoref"):
            some = [r for r in rows.values() if r["dataset"] == dataset]
            agree = _agreement(some, lambda r, rule=rule: r[rule])
            f1[rule, dataset] = agree["f1"]
            cells += [f(agree["exact_match"], 1), f(agree["f1"], 1)]
            per = [_agreement([r], lambda r, rule=rule: r[rule])["f1"] - _agreement([r], lambda r: r["base"])["f1"]
                   for r in some]
            moved.append(f"+{sum(x > 0 for x in per)}/-{sum(x < 0 for x in per)}")
        fractions = " / ".join(f(statistics.mean(r["flops"][rule] for r in rows.values() if r["dataset"] == d), 3)
                               for d in ("disfl_qa", "quoref"))
        figures.append(f"| {labels.get(rule, rule)} | {' | '.join(cells)} | {fractions} | "
                       f"{'-' if rule == 'base' else '; '.join(moved)} |")
    figures.append(f"key+value deviation gains {f(f1['kv', 'quoref'] - f1['base', 'quoref'], 1)} F1 on Quoref and "
                   f"loses {f(f1['base', 'disfl_qa'] - f1['kv', 'disfl_qa'], 1)} on Disfl-QA")
    first = {d: [{"full": r["paths"]["full"]["answer"], **{p: r["paths"][p]["answer"] for p in ("r=0.15", "r=0.3")}}
                 for r in _jsonl(f"selective_recompute/chat_answer_{d}.jsonl") if r.get("position", 99) < 40]
             for d in ("disfl_qa", "quoref")}
    high = {d: _agreement(first[d], lambda r: r["r=0.3"])["f1"] for d in first}
    low = {d: _agreement(first[d], lambda r: r["r=0.15"])["f1"] for d in first}
    figures.append(f"reaches only {f(high['disfl_qa'], 1)} / {f(high['quoref'], 1)} agreement F1 against "
                   f"{f(low['disfl_qa'], 1)} / {f(low['quoref'], 1)} at 0.15 ({f(high['disfl_qa'] - low['disfl_qa'], 1)}"
                   f" / {f(high['quoref'] - low['quoref'], 1)} points more;")
    return figures


def _recompute_prose() -> list[str]:
    """The selective-recompute prose beside the tables: query-aware rules, the oracle, a bf16 store, the raw-prompt
    runs 1 and 2 (speed-ups with their FLOP bounds, time per question, peak memory) and the chat run's own
    counts, each from its results file."""
    one = lambda x: f(x, 1)  # noqa: E731
    pair = lambda d, key, fmt=one: f"{fmt(d['disfl_qa'][key])} / {fmt(d['quoref'][key])}"  # noqa: E731
    query = load("selective_recompute/selection_rules_r0.15_query_after_prefix.json")["rules"]
    figures = ["(agreement EM / F1): library " + " and ".join(
        f"{one(query['library'][d]['agreement_em'])} / {one(query['library'][d]['agreement_f1'])}"
        for d in ("disfl_qa", "quoref")) + "; " + "; ".join(
        f"`{rule}` " + " and ".join(f"{one(query[rule][d]['agreement_em'])} / {one(query[rule][d]['agreement_f1'])}"
                                  for d in ("disfl_qa", "quoref")) for rule in ("qmass", "qmass_dev")),
        f"(FLOP fraction {pair(query['qmass'], 'flop_fraction_mean', lambda x: f(x, 3))} with the question's extra "
        f"pass, library {pair(query['library'], 'flop_fraction_mean', lambda x: f(x, 3))})",
        f"the corrected formula gives the library rule {pair(query['library'], 'flop_fraction_mean', lambda x: f(x, 3))}"]
    full = load("selective_recompute/oracle_after_prefix_r0.15_300.json")["rules"]
    figures.append(f"| 0.15, all 300 questions | {pair(full['library'], 'flop_fraction_mean', lambda x: f(x, 3))} | "
                   + " | ".join(f"{one(full[rule][d]['agreement_em'])} / {one(full[rule][d]['agreement_f1'])}"
                                for d in ("disfl_qa", "quoref") for rule in ("library", "oracle")) + " |")
    figures.append(f"(library {one(full['library']['quoref']['agreement_f1'])}, oracle "
                   f"{one(full['oracle']['quoref']['agreement_f1'])};")
    v = load("selective_recompute/oracle_after_prefix_r0.15.json")["rules"]["oracle_v"]
    figures.append(f"(`oracle_v`, values only, at 0.15: {one(v['disfl_qa']['agreement_em'])} / "
                   f"{one(v['disfl_qa']['agreement_f1'])} and {one(v['quoref']['agreement_em'])} / "
                   f"{one(v['quoref']['agreement_f1'])}.)")
    half = load("selective_recompute/oracle_after_prefix_r0.5.json")["rules"]["library"]["disfl_qa"]
    figures.append(f"costs {f(half['flop_fraction_mean'])} of the full prompt's (a FLOP bound of "
                   f"{one(1 / half['flop_fraction_mean'])}x")
    figures.append(f"stay below 90 % ({one(half['agreement_f1'])} on 40 questions, above)")
    rounding = load("selective_recompute/rounding_bf16_store.json")["datasets"]
    chat = load("selective_recompute/chat_answer.json")["datasets"]
    bf16 = {d: rounding[d]["paths"]["r=0.15"] for d in rounding}
    same, timed = [], {"chat": 0.0, "streamed": 0.0}
    for d in ("disfl_qa", "quoref"):
        fp32 = {r["id"]: r for r in _jsonl(f"selective_recompute/chat_answer_{d}.jsonl") if "paths" in r}
        rounded = [r for r in _jsonl(f"selective_recompute/rounding_bf16_store_{d}.jsonl") if "paths" in r]
        same.append(sum(r["paths"]["r=0.15"]["answer"] == fp32[r["id"]]["paths"]["r=0.15"]["answer"] for r in rounded))
        timed["chat"] += sum(sum(p["total"] for p in r["paths"].values()) + r["encode_seconds"]
                             for r in fp32.values() if r["position"] >= 8)
        timed["streamed"] += sum(sum(p["total"] for p in r["paths"].values()) + r["encode_seconds"]
                                 for r in _jsonl(f"selective_recompute/chat_answer_streamed_{d}.jsonl") if "paths" in r)
    figures += [f"{same[0]} and {same[1]} of 300 answers are the same as from fp32 caches",
                f"F1 vs gold {pair(bf16, 'f1')} (full prompt {pair({d: chat[d]['paths']['full'] for d in chat}, 'f1')}",
                f"TTFT speed-up {f(bf16['disfl_qa']['ttft_speedup_median'])}x / {f(bf16['quoref']['ttft_speedup_median'])}x "
                f"(FLOP bound {f(bf16['disfl_qa']['ttft_flop_bound_median'])}x / "
                f"{f(bf16['quoref']['ttft_flop_bound_median'])}x)",
                f"the 584 questions after the pilot spent {timed['chat']:,.0f} s generating and encoding passages, "
                f"~{timed['chat'] / 584:.1f} s per question",
                f"({timed['streamed']:,.0f} s generating and encoding passages, summed over the two files.)"]
    after = load("selective_recompute/chat_answer_after_prefix.json")["datasets"]
    figures.append("TTFT in this run (other work ran on the machine beside it): " + " at 0.15 and ".join(
        " / ".join(f(after[d]["paths"][p]["ttft_speedup_median"], digits) + "x" for d in ("disfl_qa", "quoref"))
        for p, digits in (("r=0.15", 2), ("r=0", 1))) + " at 0 (FLOP bounds " + " and ".join(
        " / ".join(f(after[d]["paths"][p]["ttft_flop_bound_median"], digits) + "x" for d in ("disfl_qa", "quoref"))
        for p, digits in (("r=0.15", 2), ("r=0", 1))) + ")")
    words, contained, encode = [], [], []
    for d in ("disfl_qa", "quoref"):
        rows = [r for r in _jsonl(f"selective_recompute/chat_answer_{d}.jsonl") if "paths" in r]
        words.append(statistics.median(len(r["paths"]["full"]["answer"].split()) for r in rows))
        contained.append(sum(any(g.lower() in r["paths"]["full"]["answer"].lower() for g in r["gold"]["text"])
                             for r in rows))
        encode += [r["encode_seconds"] for r in rows]
    figures += [f"(median full answer {words[0]:.0f} / {words[1]:.0f} words; a gold answer appears inside the full "
                f"prompt's answer for {contained[0]} of 300 Disfl-QA and {contained[1]} of 300 Quoref questions)",
                f"took a median {f(statistics.median(encode))} s per question"]
    ratio_one = {d: chat[d]["paths"]["r=1"] for d in chat}
    figures.append(f"TTFT {pair(ratio_one, 'ttft_speedup_median', f)}x (FLOP bound "
                   f"{pair(ratio_one, 'ttft_flop_bound_median', f)}x)".replace(" / ", "x / "))
    # the raw-prompt runs 1 (`first_newline`) and 2 (`text_answer`)
    run1 = {d: v["paths"] for d, v in load("selective_recompute/first_newline.json")["datasets"].items()}
    run2 = {d: v["paths"] for d, v in load("selective_recompute/text_answer.json")["datasets"].items()}
    speed = lambda run, p, digits=1: " / ".join(  # noqa: E731
        f(run[d][p]["ttft_speedup_median"], digits) + "x" for d in ("disfl_qa", "quoref"))
    bound = lambda run, p: "-".join(  # noqa: E731
        sorted({f(run[d][p]["ttft_flop_bound_median"], 1) for d in ("disfl_qa", "quoref")}, key=float))
    figures.append(f"{speed(run1, 'r=0')} at ratio 0, {speed(run1, 'r=0.05')} at 0.05, {speed(run1, 'r=0.15')} at "
                   f"0.15, {f(run1['disfl_qa']['r=0.3']['ttft_speedup_median'], 1)}x at 0.3, "
                   f"{f(run1['disfl_qa']['r=1']['ttft_speedup_median'], 1)}x at 1 (FLOP bounds {bound(run1, 'r=0')}x, "
                   f"{bound(run1, 'r=0.05')}x, {bound(run1, 'r=0.15')}x, {bound(run1, 'r=0.3')}x and "
                   f"{f(run1['disfl_qa']['r=1']['ttft_flop_bound_median'])}x)")
    assert {f(run1[d]["r=0.3"]["ttft_speedup_median"], 1) for d in run1} == {f(run1["disfl_qa"]["r=0.3"][
        "ttft_speedup_median"], 1)} and {f(run1[d]["r=1"]["ttft_speedup_median"], 1) for d in run1} == {
        f(run1["disfl_qa"]["r=1"]["ttft_speedup_median"], 1)}, "the page gives one figure for both datasets"
    figures.append(f"run 2: {speed(run2, 'r=0.15', 2)} (bound " + " / ".join(
        f(run2[d]["r=0.15"]["ttft_flop_bound_median"]) + "x" for d in ("disfl_qa", "quoref")) + ")")
    figures.append(f"run 1, 0: {speed(run1, 'r=0')} (bound " + " / ".join(
        f(run1[d]["r=0"]["ttft_flop_bound_median"], 1) + "x" for d in ("disfl_qa", "quoref")) + "), agreement EM "
        + " / ".join(f(run1[d]["r=0"]["agreement_em"], 1) for d in ("disfl_qa", "quoref")) + f"; 1: "
        f"{speed(run1, 'r=1', 2)} (bound {f(run1['quoref']['r=1']['ttft_flop_bound_median'])}x)")
    per_question = []
    for d in ("disfl_qa", "quoref"):
        rows = [r for r in _jsonl(f"selective_recompute/first_newline_{d}.jsonl") if "paths" in r]
        per_question.append(statistics.median(sum(p["total"] for p in r["paths"].values()) + r["encode_seconds"]
                                              for r in rows))
    figures += [f"at a median {per_question[0]:.0f} / {per_question[1]:.0f} s per question",
                f"about {300 * per_question[0] / 3600:.1f} / {300 * per_question[1] / 3600:.1f} hours for each process",
                f"gave a median {per_question[0]:.0f} / {per_question[1]:.0f} s per question"]
    views = [r["paths"] for r in _jsonl("selective_recompute/memory_views.jsonl") if "paths" in r]
    spread_mb = max(abs(v[p]["peak_rss_growth_mb"] - v["r=0"]["peak_rss_growth_mb"]) for v in views for p in v
                    if p != "full")
    above = [v["r=0"]["peak_rss_growth_mb"] - v["full"]["peak_rss_growth_mb"] for v in views]
    share = [100 * a / v["full"]["peak_rss_growth_mb"] for a, v in zip(above, views)]
    figures += [f"(every ratio equals r=0 to {math.ceil(spread_mb * 100) / 100:.2f} MiB)",  # the largest gap, rounded up
                f"peaks {above[0]:.1f} / {above[1]:.1f} MiB ({share[0]:.0f} / {share[1]:.0f} %) above the full prompt",
                f"**missed** by {above[0]:.1f} / {above[1]:.1f} MiB"]
    return figures



# ------------------------------------------------------------------------------------------ Reproducing the papers
def _bold(m: dict) -> str:
    return f"**{times(m).replace('x [', 'x** [')}"


@page("docs/reproducing.md")
def reproducing() -> list[str]:
    deformer = load("bench_deformer.json")
    speed = measurement(deformer, "bert-base: speed-up of cached DeFormer over BERT")
    memory = [round(100 * (measurement(deformer, f"{c}: DeFormer forward extra memory")["median"]
                           / measurement(deformer, f"{c}: BERT forward extra memory")["median"] - 1))
              for c in ("bert-base", "minilm")]
    quoref = {name: load(f"quoref_table/{name}.json") for name in ("full", "deformer_kd")}
    shipped = load("checkpoints/deformer-minilm-qa-reference/metrics.json")
    teacher = load("checkpoints/minilm-qa-reference/metrics.json")["validation"]["disfl_qa"]
    gpu = [{r["num_decomposed_layers"]: r for r in load("reproduce/deformer/h100_k4_k3_lr1e-4_3000steps.json")["rows"]},
           {r["learning_rate"]: r for r in load("reproduce/deformer/h100_k4_lr2e-4_lr3e-4_6000steps.json")["rows"]}]
    figures = [
        f"{_bold(speed)} (FLOP ratio {f(speed['bound']['value'])}x; `bench_deformer.json`)",
        f"extra forward memory {minus(memory[0], 0)}% (bert-base), {minus(memory[1], 0)}% (MiniLM)",
        f"{f(quoref['deformer_kd']['cached_f1'])} vs {f(quoref['full']['eval_f1'])} F1 on Quoref "
        f"({minus(quoref['deformer_kd']['cached_f1'] - quoref['full']['eval_f1'])}); first span "
        f"{f(quoref['full']['baselines']['first_span']['f1'])}",
        f"k = 3: {f(shipped['cached_f1'])} vs {f(teacher['eval_f1'])} F1 on Disfl-QA (always-empty "
        f"{f(shipped['baselines']['always_empty']['f1'])})",
        f"k = 3: {f(gpu[0][3]['cached_f1'])} F1, k = 4: {f(gpu[0][4]['cached_f1'])} F1 (3,000 steps, "
        f"{min(r['train_seconds'] for r in gpu[0].values()):.0f}–{max(r['train_seconds'] for r in gpu[0].values()):.0f} s "
        f"on one H100); k = 4 at lr 2e-4 / 3e-4, 6,000 steps: {f(gpu[1][2e-4]['cached_f1'])} / {f(gpu[1][3e-4]['cached_f1'])} "
        f"(always-empty {f(gpu[1][2e-4]['baselines']['always_empty']['f1'])};",
    ]
    base, large = load("bench_readonce_bart_base.json"), load("bench_readonce_bart_large.json")
    rb = {n: measurement(base, f"bart-base k=8: {n}") for n in ("speed-up amortized", "speed-up precomputed",
                                                                  "training step speed-up")}
    rl = {n: measurement(large, f"bart-large k=8: {n}") for n in ("speed-up amortized", "speed-up precomputed",
                                                                    "training step speed-up")}
    figures += [
        f"{_bold(rb['speed-up amortized'])} (encoded once per passage; FLOP bound "
        f"{f(rb['speed-up amortized']['bound']['value'])}x), {_bold(rb['speed-up precomputed'])} (precomputed; "
        f"{f(rb['speed-up precomputed']['bound']['value'])}x), bart-base; {times(rl['speed-up amortized'])} / "
        f"{times(rl['speed-up precomputed'])} bart-large (bounds {f(rl['speed-up amortized']['bound']['value'])}x / "
        f"{f(rl['speed-up precomputed']['bound']['value'])}x;",
        f"{times(rb['training step speed-up'])} (bart-base, CPU; FLOP bound "
        f"{f(rb['training step speed-up']['bound']['value'])}x; {f(rl['training step speed-up']['median'])}x bart-large, "
        f"bound {f(rl['training step speed-up']['bound']['value'])}x)",
    ]
    steps = {n: load(f"readonce_learning_h100/xsum_warm_{n}_lr1e-4.json") for n in ("baseline", "k2", "k8")}
    per_batch = {n: s.get("stage1_seconds_per_batch", s.get("stage2_seconds_per_batch")) for n, s in steps.items()}
    figures.append(f"step {f(per_batch['k2'], 3)} s (k = 2) / {f(per_batch['k8'], 3)} s (k = 8) vs "
                   f"{f(per_batch['baseline'], 3)} s (baseline)")
    qa = [load(f"readonce_learning_h100/qa_{n}_lr1e-4.json")["eval_disfl_qa_f1"] for n in ("baseline", "k2", "k8")]
    answerable = load("trivial_baselines.json")["disfl_qa_answerable_generation"]
    figures.append(f"Disfl-QA F1 {f(min(qa), 1)}–{f(max(qa), 1)} vs {f(answerable['first_span']['f1'])} (first sentence "
                   f"{f(answerable['first_sentence']['f1'])}")
    figures.append(f"{f(steps['k2']['eval_rougeL'])} vs {f(steps['baseline']['eval_rougeL'])} ROUGE-L (baseline BART); "
                   f"lead-3 {f(load('xsum_table/full.json')['eval_baselines']['lead_3']['rougeL'])}")
    ro = load("reproduce/readonce/h100_qa1500_xsum1000_lr1e-4.json")
    rows = {r["row"]: r for r in ro["rows"]}
    figures.append("QA F1 Disfl-QA / Quoref: " + ", ".join(
        f"{label} {f(rows[n]['qa']['disfl_qa']['f1'])} / {f(rows[n]['qa']['quoref']['f1'])}"
        for n, label in (("baseline", "baseline"), ("k2", "k = 2"), ("k8", "k = 8")))
        + f" (first span {f(ro['baselines']['disfl_qa']['first_span']['f1'])} / "
          f"{f(ro['baselines']['quoref']['first_span']['f1'])}); XSum ROUGE-L: " + ", ".join(
        f"{label} {f(rows[n]['xsum']['rougeL'])}" for n, label in (("baseline", "baseline"), ("k2", "k = 2"),
                                                                    ("k8", "k = 8")))
        + f" (lead-1 {f(ro['baselines']['xsum']['lead_1']['rougeL'])}, lead-3 "
          f"{f(ro['baselines']['xsum']['lead_3']['rougeL'])})")
    seconds = [r["train_seconds"] for r in ro["rows"]]
    figures.append(f"rows trained {min(seconds):.0f}–{max(seconds):.0f} s each")
    austen = {n: load(f"austen_table2/{n}.json") for n in ("baseline", "recurrent_ov0")}
    figures.append(f"{f(austen['recurrent_ov0']['test_persuasion_overlap0']['token_perplexity'])} vs "
                   f"{f(austen['baseline']['test_persuasion_overlap30']['token_perplexity'])} test perplexity; the "
                   "recurrent model matches the baseline at equal overlap "
                   f"({f(austen['baseline']['test_persuasion_overlap0']['token_perplexity'])})")
    figures.append(f"(zeroing it: {f(austen['recurrent_ov0']['test_persuasion_overlap0']['token_perplexity'])} → "
                   f"{f(austen['recurrent_ov0']['test_persuasion_overlap0']['token_perplexity_recurrence_zeroed'])})")
    t2 = load("reproduce/recurrent_table2/h100_budget300.json")
    rec = [r for r in t2["rows"] if r["recurrent"] and r["test_token_perplexity"] is not None]
    at = lambda rows, o, k="test_token_perplexity": [r[k] for r in rows if r["test_overlap"] == o]  # noqa: E731
    plain = {r["test_overlap"]: r for r in t2["rows"] if not r["recurrent"]}
    pre = t2["baselines"]["pretrained"]

    def between(values):
        return f"{f(min(values))}–{f(max(values))}"
    figures.append(f"recurrent at overlap 0 {between(at(rec, 0))} (recurrence zeroed "
                   f"{between(at(rec, 0, 'test_token_perplexity_recurrence_zeroed'))}) vs the baseline's "
                   f"{f(plain[0]['test_token_perplexity'])} at overlap 0 and {f(plain[30]['test_token_perplexity'])} at "
                   f"overlap 30; at overlap 5 {between(at(rec, 5))} vs {f(plain[5]['test_token_perplexity'])}; SmolLM2 "
                   "not fine-tuned " + " / ".join(f(pre[f"overlap{o}"]["test_token_perplexity"]) for o in (0, 5, 30)))
    steps = [r["train_steps"] for r in t2["rows"] if r["recurrent"]]
    figures.append(f"the baseline made {plain[0]['train_steps']:,} steps, the recurrent models {min(steps)}–{max(steps)}")
    smollm2 = measurement(load("bench_recurrent_memory.json"), "train peak ratio 20 / 1")
    figures.append(f"training peak on 20 windows **{f(smollm2['median'], 3)}x**")
    gpt2 = load("bench_recurrent_memory_gpt2.json")
    figure = [measurement(gpt2, f"training peak resident, {a}, 20 windows")["median"]
              / measurement(gpt2, f"training peak resident, {a}, 1 windows")["median"]
              for a in ("freed blocks returned", "glibc defaults")]
    figures.append(f"at GPT-2 size {f(figure[0])}x with freed blocks returned to the system, {f(figure[1])}x with "
                   "glibc's defaults")
    throughput = measurement(load("bench_recurrent_throughput.json"), "inference: recurrent time / plain_sequential time")
    figures.append(f"inference {times(throughput)} the time of window-by-window GPT-2 (FLOP bound "
                   f"{f(throughput['bound']['value'], 1)};")
    rt = load("bench_readtwice.json")
    forward, train = (measurement(rt, f"{n}: readtwice time / bert time") for n in ("forward", "train_step"))
    figures += [f"| {f(rt['extra']['speed']['param_ratio'])}x |",
                f"forward {times(forward)} (FLOP ratio {f(forward['bound']['value'])}x), training step {times(train)} "
                f"(FLOP ratio {f(train['bound']['value'])}x; `bench_readtwice.json`)"]
    table = {n: load(f"readtwice_table/{n}.json") for n in ("baseline", "e", "e_ss", "e_ro")}
    figures.append(f"{f(table['e']['eval_f1'])} > {f(table['e_ss']['eval_f1'])}, both below the baseline's "
                   f"{f(table['baseline']['eval_f1'])} (first mention {f(table['baseline']['first_mention_baseline_f1'])})")
    figures.append(f"{f(table['e_ro']['eval_f1'])} F1, above the paper's layout ({f(table['e']['eval_f1'])})")
    runs = [{r["row"]: r for r in load(f"reproduce/readtwice_quoref/{n}.json")["rows"]} for n in READTWICE_RUNS]
    figures.append(", ".join(f"{label} {between([run[n]['f1'] for run in runs])}" for n, label in (
        ("baseline", "baseline"), ("e", "E"), ("e_ss", "E(SS)"), ("cls", "CLS"), ("sts", "STS"))) + " F1")
    figures.append(f"read-once {between([run['e_ro']['f1'] for run in runs])}")
    figures.append(f"stopped at {runs[0]['e_ro']['train_steps']:,} of {runs[1]['e_ro']['train_steps']:,} steps")
    longdoc = {L: load(f"bench_longdoc_forward_{L}_quiet.json") for L in ("4k", "16k")}
    n4, c4 = (measurement(longdoc["4k"], f"forward {k} / full @4096") for k in ("neighborhood", "convolutional"))
    n16, c16 = (measurement(longdoc["16k"], f"forward {k} / full @16384") for k in ("neighborhood", "convolutional"))
    figures.append(f"{_bold(n4)} at 4k tokens (FLOP bound {f(n4['bound']['value'])}x), {_bold(n16)} at 16k (bound "
                   f"{f(n16['bound']['value'])}x); convolutional k = s = 3: {times(c4)} at 4k (bound "
                   f"{f(c4['bound']['value'])}x), {times(c16)} at 16k (bound {f(c16['bound']['value'])}x)")
    legacy = {r["length"]: r["train_peak_mib"] for r in load("legacy/bench_longdoc.json")["results"]
              if r["name"] == "neighborhood"}
    figures.append(f"neighborhood training peak ×{f(legacy[16384] / legacy[4096], 1)} from 4k to 16k tokens")
    xsum = {k: load(f"xsum_table/{k}.json")["eval_rougeL"] for k in ("neighborhood", "full")}
    gpu = {r["encoder_attention_type"]: r for r in load("reproduce/longdoc_xsum/results.json")["rows"]}
    lead = load("reproduce/longdoc_xsum/results.json")["baselines"]
    figures.append(f"CPU, 60 steps: {f(xsum['neighborhood'])} vs {f(xsum['full'])} (lead-3 {f(lead['lead_3']['rougeL'])}); "
                   f"one H100, 360 s ({min(r['train_steps'] for r in gpu.values()):,}–"
                   f"{max(r['train_steps'] for r in gpu.values()):,} of 5,000 steps): neighborhood "
                   f"{f(gpu['neighborhood']['eval_rougeL'])}, full {f(gpu['full']['eval_rougeL'])}, convolutional "
                   f"{f(gpu['convolutional']['eval_rougeL'])}, per head {f(gpu['convolutional_per_head']['eval_rougeL'])} "
                   f"(lead-1 {f(lead['lead_1']['rougeL'])}, lead-3 {f(lead['lead_3']['rougeL'])})")
    qa = {n: load(f"block_attention_qa_h100/eval_{n}.json") for n in ("block_stored", "full_full", "full_stored")}
    figures.append(f"composed caches {f(qa['block_stored']['eval_stored_f1'])} F1 vs full attention on the full prompt "
                   f"{f(qa['full_full']['eval_full_f1'])} (first span {f(qa['full_full']['first-span_baseline_f1'])})")
    figures.append(f"{minus(qa['full_stored']['eval_stored_f1'] - qa['full_full']['eval_full_f1'])} F1 "
                   f"({f(qa['full_stored']['eval_stored_f1'])})")
    kv = measurement(load("bench_kv_cache_smollm2.json"), "ttft speed-up (cold store read)")
    figures.append(f"**{f(kv['median'], 1)}x** [{f(kv['min'], 1)}–{f(kv['max'], 1)}x] (median of {kv['n']} questions, "
                   f"cold store reads; FLOP bound {f(kv['bound']['value'], 1)}x;")
    return figures



# ---------------------------------------------------------------------------------------- reproduce/README, store, Hub
def _plain(x) -> str:
    """A results-table cell as `reproduce/README.md` prints it: the JSON's own number."""
    return str(x)


@page("reproduce/README.md")
def reproduce_readme() -> list[str]:
    figures = []
    for name in ("h100_k4_k3_lr1e-4_3000steps", "h100_k4_lr2e-4_lr3e-4_6000steps"):
        doc = load(f"reproduce/deformer/{name}.json")
        figures.append(f"`benchmarks/results/reproduce/deformer/{name}.json` (NVIDIA H100 80GB HBM3, {doc['date']}):")
        for row in doc["rows"]:
            figures.append(f"| {row['train_steps_scheduled']} | {row['train_seconds']} | {row['chosen']} | "
                           + " | ".join(_plain(row[k]) for k in ("calibration_f1", "cached_exact_match", "cached_f1",
                                                                  "cached_HasAns_f1", "cached_NoAns_exact")) + " |")
        shipped = doc["shipped"]
        figures.append("| shipped k = 3 | | | | | " + " | ".join(_plain(shipped[k]) for k in (
            "calibration_f1", "cached_exact_match", "cached_f1", "cached_HasAns_f1", "cached_NoAns_exact")) + " |")
    longdoc = load("reproduce/longdoc_xsum/results.json")
    for row in longdoc["rows"]:
        figures.append(f"| {row['encoder_attention_type']} | {row['train_steps']} | {row['train_seconds']} | "
                       + " | ".join(_plain(row[k]) for k in ("eval_rouge1", "eval_rouge2", "eval_rougeL",
                                                              "eval_perplexity")) + " |")
    per_step = [r["train_seconds"] / r["train_steps"] for r in longdoc["rows"]]
    figures.append(f"measured: {f(min(per_step))}-{f(max(per_step))} s per step")
    h100 = load("reproduce/readtwice_quoref/h100_3epochs_budget230.json")
    for row in h100["rows"]:
        figures.append(f"| {f(row['exact_match'])} | {f(row['f1'])} | {row['train_steps']} | {f(row['epochs'])} | "
                       f"{row['train_seconds']} |")
    seeds = [{r["row"]: r for r in load(f"reproduce/readtwice_quoref/{n}.json")["rows"]} for n in READTWICE_RUNS[1:]]
    for name in READTWICE_ROWS:
        figures.append(" | ".join(f"{f(run[name]['f1'])} ({f(run[name]['exact_match'])})" for run in seeds) + " |")
    readonce = load("reproduce/readonce/h100_qa1500_xsum1000_lr1e-4.json")
    for row in readonce["rows"]:
        qa, xsum = row["qa"], row["xsum"]
        figures.append(f"| {f(qa['disfl_qa']['exact_match'])} / {f(qa['disfl_qa']['f1'])} | "
                       f"{f(qa['quoref']['exact_match'])} / {f(qa['quoref']['f1'])} | {f(xsum['rouge1'])} / "
                       f"{f(xsum['rouge2'])} / {f(xsum['rougeL'])} | {qa['training']['train_seconds']} | "
                       f"{xsum['training']['train_seconds']} |")
    t2 = load("reproduce/recurrent_table2/h100_budget300.json")
    pre = t2["baselines"]["pretrained"]
    figures.append("| " + " | ".join(f(pre[f"overlap{o}"]["test_token_perplexity"]) for o in (0, 5, 30)) + " | 0 | |")
    plain = {r["test_overlap"]: r for r in t2["rows"] if not r["recurrent"]}
    figures.append("| " + " | ".join(f(plain[o]["test_token_perplexity"]) for o in (0, 5, 30))
                   + f" | {plain[0]['train_steps']} | {plain[0]['train_seconds']} |")
    for lr, label in ((0.0001, "1e-4"), (0.002, "2e-3")):
        rows = {r["test_overlap"]: r for r in t2["rows"] if r["recurrent"] and r["recurrence_learning_rate"] == lr}
        figures.append(f"| recurrent (recurrence lr {label}) | " + " | ".join(
            f"{f(rows[o]['test_token_perplexity'])} ({f(rows[o]['test_token_perplexity_recurrence_zeroed'])})"
            for o in (0, 5)) + " | not scored | " + " / ".join(str(rows[o]["train_steps"]) for o in (0, 5, 30))
            + " | " + " / ".join(str(rows[o]["train_seconds"]) for o in (0, 5, 30)) + " |")
    figures.append(f"the whole book, {t2['rows'][0]['test_tokens']:,} tokens")
    return figures


@page("docs/store.md")
def store() -> list[str]:
    cost = load("current_fingerprint_cost.json")
    rows = []
    for row in cost["results"]:
        cells = [f"{row['num_decomposed_layers']}", f"{f(row['parameters_in_fingerprint'] / 1e6, 1)}M"]
        for key in ("current_fingerprint_unchanged_s", "current_fingerprint_after_data_edit_s",
                    "cached_representation_fingerprint_s"):
            value = row[key]
            low = f"{value['min']:.4f}".rstrip("0") if value["min"] < 0.001 else f(value["min"], 3)
            cells.append(f"{f(value['median'], 3)} s ({low}–{f(value['max'], 3)})")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


@page("docs/hub.md")
def hub() -> list[str]:
    doc = load("bench_pipeline_store.json")
    after = "model 1 (pub_after), 15 questions in 1 call"
    each, one = (measurement(doc, f"{after}{suffix}: time with store / without") for suffix in (" each", ""))
    before = measurement(doc, "model 0 (pub_before), 15 questions in 1 call each: time with store / without")
    stored_each, plain_each = (measurement(doc, f"{after} each: s {n}") for n in ("with the warm store", "without store"))
    stored_one, plain_one = (measurement(doc, f"{after}: s {n}") for n in ("with the warm store", "without store"))
    return [f"{doc['settings']['questions']} Disfl-QA questions asked one call each take {f(each['median'])}x the time "
            f"with a warm store as without ({f(stored_each['median'])} s against {f(plain_each['median'])} s; it was "
            f"{f(before['median'], 1)}x before the digest), and asked in one call {f(one['median'])}x "
            f"({f(stored_one['median'])} s against {f(plain_one['median'])} s; FLOP bound {f(one['bound']['value'], 3)}"]


# ------------------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("path", sorted(PAGES))
def test_every_figure_is_its_results_files_value(path):
    missing = missing_figures((REPO_ROOT / path).read_text(), PAGES[path]())
    assert not missing, f"{path} lacks these figures of its results files (or shows them otherwise): {missing}"


@pytest.mark.parametrize("path", sorted(PAGES))
def test_a_figure_edited_away_from_its_file_fails(path):
    """The check can fail: in a copy of the page, one digit of one checked figure changed is reported."""
    text = (REPO_ROOT / path).read_text()
    figure = next(figure for figure in PAGES[path]() if re.search(r"\d", figure))
    digit = re.search(r"\d(?=\D*$)", figure)  # the figure's last digit
    changed = figure[:digit.start()] + str((int(digit[0]) + 1) % 10) + figure[digit.end():]
    start = flat(text).index(flat(figure))
    drifted = flat(text)[:start] + flat(changed) + flat(text)[start + len(flat(figure)):]
    assert missing_figures(text, PAGES[path]()) == [] and figure in missing_figures(drifted, PAGES[path]())
