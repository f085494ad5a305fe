"""An entry point never reports results an earlier run left in its --output_dir: a folder holding any file or run
folder the command writes is refused before the first child run starts (one line naming the folder and
--overwrite_output_dir, exit status 2), and --overwrite_output_dir removes exactly those, nothing else.

The child runs are faked (`_common.run_children` replaced) so that each command takes a second: a first run writes
per-run results, a second run into the same folder whose runs all fail (as when a signal stops them) must not
report them."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO_ROOT
from tests.reproduce.conftest import entry_point

common = entry_point("_common")

# entry point -> (the results file each of its runs writes, arguments that skip every weight and data look-up)
ENTRY_POINTS = {
    "readonce": ("readonce_results.json", ["--smoke", "--warm_start", "tiny", "--variants", "baseline", "2"]),
    "readtwice_quoref": ("readtwice_results.json", ["--smoke", "--warm_start", "tiny", "--rows", "baseline", "e"]),
    "longdoc_xsum": ("longdoc_results.json", ["--smoke", "--warm_start", "tiny", "--types", "full"]),
    "recurrent_table2": ("lm_results.json", ["--smoke", "--warm_start", "tiny", "--overlaps", "0",
                                             "--recurrence_learning_rates", "same"]),
}
# what the runs of the first command report (each entry point reads the keys it knows)
FIRST_RUN = {"train_steps": 2, "train_seconds": 1.0, "stage1_train_steps": 2, "stage1_train_seconds": 1.0,
             "eval_f1": 77.7, "eval_rougeL": 77.7}


def _fake_children(module, monkeypatch, results_file: str, fail: bool) -> list:
    """Replace `run_children`: every run writes its log and, unless `fail`, its results file with FIRST_RUN; with
    `fail`, every run fails without writing anything (a run stopped before it wrote its results). Returns the list
    of the command names of each call."""
    calls = []

    def run_children(commands, log_dir, grace_s=30.0):
        calls.append(list(commands))
        log_dir.mkdir(parents=True, exist_ok=True)
        for name, argv in commands.items():
            (log_dir / f"{name}.log").write_text("fake run\n")
            if not fail:
                run_dir = Path(argv[argv.index("--output_dir") + 1])
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / results_file).write_text(json.dumps(FIRST_RUN))
        return list(commands) if fail else []

    monkeypatch.setattr(module._common, "run_children", run_children)
    return calls


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_a_second_run_into_the_same_folder_is_refused_and_overwrite_drops_the_stale_results(
        name, tmp_path, monkeypatch, capsys):
    results_file, arguments = ENTRY_POINTS[name]
    module = entry_point(name)
    out = tmp_path / "out"
    argv = [*arguments, "--output_dir", str(out), "--data_dir", str(tmp_path / "data")]
    _fake_children(module, monkeypatch, results_file, fail=False)
    assert module.main(argv) == 0
    first = json.loads((out / "results.json").read_text())
    assert first["rows"], "the first run reports its rows"
    (out / "notes.txt").write_text("mine")  # a file of the user's, beside the runs
    (out / "other").mkdir()

    # the same command again, its runs stopped before they write anything: refused before any run starts
    calls = _fake_children(module, monkeypatch, results_file, fail=True)
    assert module._common.guarded(lambda: module.main(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(out) in err and "--overwrite_output_dir" in err and "fresh --output_dir" in err
    assert calls == [] and json.loads((out / "results.json").read_text()) == first  # nothing touched

    # with --overwrite_output_dir: the first run's files are gone, nothing of it is reported, the user's files stay
    assert module.main([*argv, "--overwrite_output_dir"]) == 1  # every run failed
    second = json.loads((out / "results.json").read_text())
    assert second["rows"] == [] and "77.7" not in (out / "results.json").read_text()
    assert "77.7" not in (out / "model_card.md").read_text()
    assert not list(out.glob(f"*/{results_file}"))
    assert (out / "notes.txt").read_text() == "mine" and (out / "other").is_dir()
    assert "removed from" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["readonce", "readtwice_quoref", "recurrent_table2"])
def test_a_rerun_whose_runs_all_stop_reports_none_of_the_earlier_rows(name, tmp_path, monkeypatch):
    """The regression itself, through nothing but `main` and the results file: these entry points read the results
    file of every run, failed or not, so the earlier command's rows were reported as the second command's."""
    results_file, arguments = ENTRY_POINTS[name]
    module = entry_point(name)
    out = tmp_path / "out"
    argv = [*arguments, "--output_dir", str(out), "--data_dir", str(tmp_path / "data")]
    _fake_children(module, monkeypatch, results_file, fail=False)
    assert module.main(argv) == 0
    first = json.loads((out / "results.json").read_text())
    _fake_children(module, monkeypatch, results_file, fail=True)
    assert module._common.guarded(lambda: module.main(argv)) != 0
    results = json.loads((out / "results.json").read_text())
    assert results == first or not results["rows"], "the first command's rows reported as the second's"


def test_a_stopped_run_rerun_with_overwrite_never_reads_the_stopped_runs_files(tmp_path, monkeypatch):
    """A stopped run leaves per-run results and no results.json (the device call's `timeout -s KILL`): the re-run is
    refused on those alone, and with --overwrite_output_dir its stopped runs are not read."""
    module = entry_point("recurrent_table2")
    results_file, arguments = ENTRY_POINTS["recurrent_table2"]
    out = tmp_path / "out"
    argv = [*arguments, "--output_dir", str(out)]
    (out / "baseline").mkdir(parents=True)
    (out / "baseline" / results_file).write_text(json.dumps(FIRST_RUN))
    calls = _fake_children(module, monkeypatch, results_file, fail=True)
    with pytest.raises(module._common.OutputDirInUse, match="baseline/"):
        module.main(argv)
    assert calls == []
    assert module.main([*argv, "--overwrite_output_dir"]) == 1
    assert json.loads((out / "results.json").read_text())["rows"] == [] and not (out / "baseline").exists()


def test_readonce_xsum_stage_keeps_the_qa_models_it_starts_from(tmp_path, monkeypatch):
    """`--stages xsum` starts from the QA runs of an earlier `--stages qa` in the same folder: that folder is not
    refused (its results.json is rewritten with both stages); a folder that already holds XSum runs is, and
    --overwrite_output_dir then removes the XSum runs only."""
    module = entry_point("readonce")
    results_file, arguments = ENTRY_POINTS["readonce"]
    out = tmp_path / "out"
    argv = [*arguments, "--output_dir", str(out), "--data_dir", str(tmp_path / "data")]
    calls = _fake_children(module, monkeypatch, results_file, fail=False)
    assert module.main([*argv, "--stages", "qa"]) == 0
    assert module.main([*argv, "--stages", "xsum"]) == 0
    assert calls == [["qa_baseline", "qa_k2"], ["xsum_baseline", "xsum_k2"]]
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert all("qa" in row and "xsum" in row for row in rows) and len(rows) == 2
    with pytest.raises(module._common.OutputDirInUse, match="xsum_baseline"):
        module.main([*argv, "--stages", "xsum"])
    calls = _fake_children(module, monkeypatch, results_file, fail=True)
    assert module.main([*argv, "--stages", "xsum", "--overwrite_output_dir"]) == 1
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert len(rows) == 2 and all("qa" in row and "xsum" not in row for row in rows)
    assert (out / "qa_k2" / results_file).is_file() and not (out / "xsum_k2").exists()


def test_deformer_refuses_and_overwrite_removes_earlier_checkpoints(tmp_path, monkeypatch):
    """The DeFormer's own child processes (one per k) are not checked: the parent claims the folder; with
    --overwrite_output_dir the earlier k folder goes (its checkpoints would be averaged into this run's candidate)."""
    module = entry_point("deformer")
    out = tmp_path / "out"
    argv = ["--smoke", "--teacher", "tiny", "--ks", "1", "--output_dir", str(out)]
    (out / "k1" / "checkpoint-5000").mkdir(parents=True)
    (out / "k1" / "row.json").write_text(json.dumps({"run": "k1", "cached_f1": 77.7}))
    started = []

    class Failing:
        def __init__(self, command, **kwargs):
            started.append(command)

        def wait(self):
            return 1

    monkeypatch.setattr(module, "subprocess", SimpleNamespace(Popen=Failing, STDOUT=subprocess.STDOUT))
    with pytest.raises(module._common.OutputDirInUse, match="k1/"):
        module.main(argv)
    assert started == [] and (out / "k1" / "checkpoint-5000").is_dir()
    assert module.main([*argv, "--overwrite_output_dir"]) == 1
    assert len(started) == 1 and "--k" in started[0] and not (out / "k1").exists()
    assert json.loads((out / "results.json").read_text())["rows"] == []


def test_claim_output_dir_removes_only_what_the_command_writes(tmp_path):
    out = tmp_path / "out"
    common.claim_output_dir(out, ["a", "b"], overwrite=False)  # no folder yet: nothing to refuse
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "c").mkdir()
    common.claim_output_dir(out, ["a", "b"], overwrite=False)  # only unrelated files
    (out / "a").mkdir()
    (out / "a" / "x.json").write_text("{}")
    (out / "b.log").write_text("log")
    (out / "model_card.md").write_text("card")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.json").write_text("{}")
    (out / "b").symlink_to(elsewhere)
    with pytest.raises(common.OutputDirInUse) as refused:
        common.claim_output_dir(out, ["a", "b"], overwrite=False)
    message = str(refused.value)
    assert message.startswith(f"{out} already holds files of an earlier run (a/, b/, b.log, model_card.md)")
    assert "--overwrite_output_dir" in message and "fresh --output_dir" in message
    assert (out / "a" / "x.json").is_file()
    common.claim_output_dir(out, ["a", "b"], overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["c", "notes.txt"]
    assert (elsewhere / "keep.json").is_file()  # a link is removed, never what it points to


def test_the_command_line_refusal_is_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    done = subprocess.run([sys.executable, "reproduce/longdoc_xsum.py", "--smoke", "--warm_start", "tiny",
                           "--output_dir", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"longdoc_xsum.py: {out} already holds") and "--overwrite_output_dir" in done.stderr
