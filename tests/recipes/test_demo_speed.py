"""The demo's speed-up: interleaved rounds by passage, the median and range of the per-round ratios, the line saying a
busy machine made the figure unreliable, and the demo's progress and note lines. No test times anything: the clock
and the timings are injected."""

import json
import logging

import pytest

from hf_readonce.recipes.deformer_qa import interleaved_rounds, speed_round_groups, summarize_speed_rounds
from hf_readonce.timing import busy_machine_note, busy_machine_reasons


def features_of(passages):
    """Pair features whose `passage_index` runs through `passages` (one feature per entry)."""
    return [{"passage_index": p, "example_index": i} for i, p in enumerate(passages)]


def test_rounds_keep_each_passage_whole_and_share_the_features():
    features = features_of([0, 1, 0, 2, 3, 1, 4, 5, 2, 6, 7, 8])
    groups = speed_round_groups(features, 3)
    assert len(groups) == 3 and sorted(i for g in groups for i in g) == list(range(len(features)))
    for group in groups:
        assert group == sorted(group)  # the features' own order
        assert 3 <= len(group) <= 5  # about a third of the 12 each
    owner = {features[i]["passage_index"]: n for n, g in enumerate(groups) for i in g}
    assert all(owner[features[i]["passage_index"]] == n for n, g in enumerate(groups) for i in g)  # never split
    # fewer passages than rounds: one round per passage; one round: everything
    assert speed_round_groups(features_of([0, 0, 1]), 3) == [[0, 1], [2]]
    assert speed_round_groups(features, 1) == [list(range(12))]
    with pytest.raises(ValueError, match="rounds"):
        speed_round_groups(features, 0)


def test_rounds_alternate_the_order_of_the_paths_and_time_each_call():
    """A fake clock advances by what each call says it took; the order of the calls is recorded."""
    now, calls = [0.0], []

    def clock():
        return now[0]

    def spend(seconds, what):
        calls.append(what)
        now[0] += seconds

    cost = {"pairs": [4.0, 6.0, 5.0], "encode": [1.0, 1.5, 0.5], "answer": [2.0, 2.0, 2.5]}
    rounds = interleaved_rounds(
        ["a", "b", "c"],
        run_pairs=lambda g: spend(cost["pairs"]["abc".index(g)], f"pairs {g}"),
        encode=lambda g: spend(cost["encode"]["abc".index(g)], f"encode {g}") or f"cache {g}",
        answer=lambda g, cache: spend(cost["answer"]["abc".index(g)], f"answer {g} from {cache}"),
        clock=clock)
    assert calls == ["pairs a", "encode a", "answer a from cache a",
                     "encode b", "answer b from cache b", "pairs b",
                     "pairs c", "encode c", "answer c from cache c"]
    assert [r["order"] for r in rounds] == ["pairs,cached", "cached,pairs", "pairs,cached"]
    assert [(r["pairs"], r["encode"], r["answer"]) for r in rounds] == list(zip(*cost.values()))


def test_speed_up_is_the_median_of_the_rounds_with_their_range():
    rounds = [{"pairs": 4.0, "encode": 2.0, "answer": 2.0},   # 2.0x precomputed, 1.0x including encoding
              {"pairs": 3.0, "encode": 1.0, "answer": 3.0},   # 1.0x, 0.75x
              {"pairs": 9.0, "encode": 1.5, "answer": 3.0}]   # 3.0x, 2.0x
    summary = summarize_speed_rounds(rounds)
    assert summary["speed_rounds"] == 3
    assert summary["speedup_precomputed"] == 2.0 and summary["speedup_precomputed_range"] == [1.0, 3.0]
    assert summary["speedup_including_encoding"] == 1.0
    assert summary["speedup_including_encoding_range"] == [0.75, 2.0]
    # the seconds of each path over every timed question
    assert (summary["uncached_seconds"], summary["passage_encode_seconds"], summary["cached_answer_seconds"]) == \
        (16.0, 4.5, 8.0)
    # one slow round moves the median no further than the middle round: not the mean of the three
    assert summarize_speed_rounds(rounds[:2] + [{"pairs": 90.0, "encode": 1.5, "answer": 3.0}])[
        "speedup_precomputed"] == 2.0
    with pytest.raises(ValueError, match="empty"):
        summarize_speed_rounds([])
    with pytest.raises(ValueError, match="positive"):
        summarize_speed_rounds([{"pairs": 1.0, "encode": 1.0, "answer": 0.0}])


def test_busy_machine_note():
    calm = {"speedup_precomputed_range": [1.7, 1.95], "speedup_including_encoding_range": [1.25, 1.4],
            "speed_load_average": 1.9, "speed_cpus": 2}
    assert busy_machine_note(calm) is None
    assert busy_machine_note({}) is None  # nothing recorded (a run without the timed rounds)
    wide = busy_machine_note({**calm, "speedup_precomputed_range": [0.78, 2.97]})
    assert "busy" in wide and "unreliable" in wide and "0.78-2.97x" in wide and "load average" not in wide
    loaded = busy_machine_note({**calm, "speed_load_average": 4.62})
    assert "unreliable" in loaded and "1-minute load average 4.62 on 2 usable CPUs" in loaded
    # the demo's own threads make a load near the CPU count on an idle machine: up to 1.5x the CPUs is not flagged
    assert busy_machine_note({**calm, "speed_load_average": 2.0}) is None
    assert busy_machine_note({**calm, "speed_load_average": 2.9}) is None
    assert "load average 3.10" in busy_machine_note({**calm, "speed_load_average": 3.1})
    # no load average (an OS without os.getloadavg): the range alone decides
    without = {key: value for key, value in calm.items() if key != "speed_load_average"}
    assert busy_machine_note(without) is None
    assert "1.00-2.00x" in busy_machine_note({**without, "speedup_including_encoding_range": [1.0, 2.0]})


def fake_metrics(**changes):
    """What `run` returns for the demo (the fields its summary reads), with `changes`."""
    metrics = {"num_decomposed_layers": 3, "compute_dtype": "float32", "eval_questions": 4, "eval_passages": 2,
               "cached_exact_match": 50.0, "cached_f1": 60.0, "null_score_diff_threshold": 0.5,
               "baselines": {"always_empty": {"exact_match": 25.0, "f1": 25.0}}, "speed_questions": 4,
               "speed_rounds": 3, "speedup_precomputed": 1.81, "speedup_precomputed_range": [1.7, 1.95],
               "speedup_including_encoding": 1.33, "speedup_including_encoding_range": [1.25, 1.4],
               "flop_ratio_precomputed": 1.65, "flop_ratio_including_encoding": 1.1, "speed_load_average": 0.5,
               "speed_cpus": 2}
    return {**metrics, **changes}


@pytest.fixture
def fake_demo(data_dir, monkeypatch):
    """`demo.main` with the pipeline's `run` replaced: it logs the set-aside warning as the real one does and returns
    `fake_metrics(**changes)`; the arguments it was called with are kept in `calls`."""
    import hf_readonce.recipes.demo as demo

    calls, changes = [], {}

    def run(model_args, data_args, training_args):
        calls.append((model_args, data_args, training_args))
        logging.getLogger("hf_readonce.recipes.deformer_qa").warning(
            "%s: set aside %d row(s) with an empty question or context, or answers not in it: %s",
            data_args.validation_file, 1, "disflqa-7464")
        return fake_metrics(**changes)

    monkeypatch.setattr(demo, "run", run)
    return lambda *argv, **new: changes.clear() or changes.update(new) or demo.main(
        ["--data_dir", str(data_dir), *argv]), calls


def test_demo_prints_median_and_range_and_no_busy_line_on_a_calm_machine(fake_demo, capsys):
    main, calls = fake_demo
    main()
    captured = capsys.readouterr()
    assert ("(4 questions timed, median of 3 interleaved rounds): 1.81x (range 1.70-1.95x) with passages "
            "precomputed (FLOP ratio 1.65x), 1.33x (range 1.25-1.40x) including encoding each passage once "
            "(FLOP ratio 1.10x).") in captured.out
    assert "busy" not in captured.out + captured.err
    # the rows set aside: one note line on stderr, not logging's raw WARNING:name:message form
    assert "hf-readonce demo: note: " in captured.err and "set aside 1 row(s)" in captured.err
    assert "WARNING:" not in captured.err
    data_args, training_args = calls[0][1:]
    assert data_args.speed_rounds == 3 and training_args.disable_tqdm is False  # the bars are shown
    assert not logging.getLogger("hf_readonce").handlers  # the note handler is gone after the run


def test_demo_says_when_the_machine_was_busy(fake_demo, capsys):
    main, calls = fake_demo
    main("--speed_rounds", "5", "--no-progress", speedup_precomputed=1.2, speedup_precomputed_range=[0.78, 2.97],
         speed_load_average=4.62, speed_rounds=5)
    out = capsys.readouterr().out
    lines = out.splitlines()
    speed = next(i for i, line in enumerate(lines) if line.startswith("Speed-up over"))
    assert "median of 5 interleaved rounds): 1.20x (range 0.78-2.97x)" in lines[speed]
    busy = lines[speed + 1]
    assert busy.startswith("The machine was busy while timing") and "unreliable" in busy
    assert "1-minute load average 4.62 on 2 usable CPUs" in busy and "0.78-2.97x" in busy
    data_args, training_args = calls[0][1:]
    assert data_args.speed_rounds == 5 and training_args.disable_tqdm is True  # --no-progress
    # with --json, stdout stays the JSON document; the busy line goes to stderr
    main("--json", speedup_precomputed_range=[0.78, 2.97])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["speedup_precomputed_range"] == [0.78, 2.97]
    assert "hf-readonce demo: note: The machine was busy" in captured.err


def test_demo_no_progress_silences_the_weight_loading_bar_only_while_it_runs(fake_demo, monkeypatch):
    from transformers.utils import logging as hf_logging

    import hf_readonce.recipes.demo as demo

    main, _ = fake_demo
    seen, inner = [], demo.run
    monkeypatch.setattr(demo, "run", lambda *args: seen.append(hf_logging.is_progress_bar_enabled()) or inner(*args))
    assert hf_logging.is_progress_bar_enabled()
    main("--no_progress")
    main()
    assert seen == [False, True] and hf_logging.is_progress_bar_enabled()


def test_busy_machine_reasons_read_a_metrics_file_safely():
    """A card reads the rule from a user's metrics file: malformed entries (a one-element range, a bool load, zero
    CPUs, strings) count as not recorded instead of raising."""
    calm = {"speed_load_average": 1.0, "speed_cpus": 2}
    assert busy_machine_reasons(calm) == []
    for odd in ({"speedup_precomputed_range": [1.0]}, {"speedup_precomputed_range": "1-3"},
                {"speed_load_average": True, "speed_cpus": 0}, {"speed_load_average": "9", "speed_cpus": 2},
                {"speedup_including_encoding_range": [True, 5.0]}):
        assert busy_machine_reasons({**calm, **odd}) == [], odd
    assert busy_machine_reasons({**calm, "speedup_precomputed_range": (1.0, 2.0, 9.0)}) == \
        ["the rounds' speed-ups with passages precomputed range 1.00-2.00x"]
