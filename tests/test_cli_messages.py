"""What `hf-readonce` says where a newcomer looked for it: what a stopped command left behind (each command its own
line), `--no-progress` taken by every command, a file given as MODEL named as such, the counts a summary line left
out, a note before a plain `encode` recomputes what a lost index no longer lists, and a store's mismatch said once,
the specific reason first; the lines `verify --recompute --documents` sets aside, a setting's range error in the words
of the option typed, a config.json without model_type, and what `--output` creates."""

import re

import pytest

import hf_readonce.cli as cli
from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationStore
from tests.conftest import write_jsonl


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- --no-progress
def _required_arguments(parser) -> list[str]:
    """Placeholder values for every positional argument and required option of a subcommand's parser."""
    values = []
    for action in parser._actions:
        if not action.option_strings:
            values.append("x")
        elif action.required:
            values += [action.option_strings[0], "x"]
    return values


def test_every_command_takes_no_progress(monkeypatch):
    """One shared option: each subcommand parses `--no-progress` (`info` and `prune` refused it); the demo, which
    parses its own arguments, gets it passed on (it turns off its own bars and Trainer's too:
    tests/recipes/test_demo_speed.py)."""
    import argparse

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"encode", "answer", "summarize", "info", "verify", "prune", "publish", "checkpoints", "demo"} <= \
        set(commands)
    for name, sub in commands.items():
        if name == "demo":
            continue
        args = parser.parse_args([name, *_required_arguments(sub), "--no-progress"])
        assert args.no_progress is True, name
    import hf_readonce.recipes.demo as demo

    seen = {}

    def fake_demo(argv):
        seen.update(argv=argv)

    monkeypatch.setattr(demo, "main", fake_demo)
    assert cli_main(["demo", "--no-progress", "--max-steps", "3"]) == 0
    assert seen == {"argv": ["--no-progress", "--max-steps", "3"]}
    assert cli_main(["checkpoints", "--no-progress"]) == 0  # and the commands that show no bar run as before


# ---------------------------------------------------------------------------------------------- a stopped command
def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_a_stopped_command_says_what_it_left(tmp_path, checkpoint, qa_rows, capsys, monkeypatch):
    """Ctrl-C (exit 130): `encode` counts the documents it committed; `answer` leaves --output as it was, even when
    stopped while writing it; with --encode-missing the encoded passages are kept; commands that write nothing say
    only `interrupted.`"""
    rows = qa_rows[:6]
    docs, questions = write_jsonl(tmp_path / "docs.jsonl", rows), write_jsonl(tmp_path / "q.jsonl", rows)
    store = tmp_path / "store"
    common = ["--store", str(store), "--no-progress", "--max-passage-length", "64", "--doc-stride", "16"]
    import hf_readonce.representations as representations

    fill_store = representations.fill_store

    def stopped_after_three(adapter, store, documents, **kwargs):  # the 4th document never comes: Ctrl-C
        def first_three():
            for number, document in enumerate(documents):
                if number == 3:
                    raise KeyboardInterrupt
                yield document
        return fill_store(adapter, store, first_three(), **{**kwargs, "documents_per_batch": 1})

    monkeypatch.setattr(representations, "fill_store", stopped_after_three)
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common]) == 130
    line = _one_line(capsys.readouterr().err)
    assert len(RepresentationStore(store)) == 3
    assert line == ("hf-readonce encode: interrupted; committed shards are kept (3 document(s) encoded by this run), "
                    "re-run to finish."), line
    monkeypatch.setattr(representations, "fill_store", fill_store)

    # answer stopped while writing its output: the previous file stays whole, no temporary file is left
    output = tmp_path / "preds.jsonl"
    output.write_text("earlier predictions\n")
    answer = ["answer", str(checkpoint), "--questions", str(questions), "--output", str(output), *common]
    write = cli._write_predictions

    def write_then_stop(output, examples, predictions, **kwargs):  # Ctrl-C after two lines of the output
        def two_then_stop():
            for number, example in enumerate(examples):
                if number == 2:
                    raise KeyboardInterrupt
                yield example
        write(output, two_then_stop(), predictions, **kwargs)

    monkeypatch.setattr(cli, "_write_predictions", write_then_stop)
    assert cli_main(answer + ["--encode-missing"]) == 130
    monkeypatch.setattr(cli, "_write_predictions", write)
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"hf-readonce answer: interrupted; no predictions were written (--output {output} is as "
                           "it was"), line
    assert "--encode-missing encoded are in committed shards of --store and kept" in line
    assert "committed shards are kept, re-run" not in line
    assert output.read_text() == "earlier predictions\n" and sorted(tmp_path.iterdir()) == sorted(
        [docs, questions, store, output])
    assert len(RepresentationStore(store)) == len({r["context"] for r in rows})  # what it encoded is kept

    # stopped once the predictions are written (while scoring): said so
    monkeypatch.setattr(cli, "_with_gold_answers", _interrupt)
    assert cli_main(answer) == 130
    assert _one_line(capsys.readouterr().err) == (f"hf-readonce answer: interrupted; the predictions were written to "
                                                  f"{output} before the stop.")
    assert output.read_text() != "earlier predictions\n"

    # commands that write nothing
    monkeypatch.setattr(RepresentationStore, "verify", _interrupt)
    assert cli_main(["verify", "--store", str(store), "--no-progress"]) == 130
    assert _one_line(capsys.readouterr().err) == "hf-readonce verify: interrupted."
    monkeypatch.setattr(RepresentationStore, "info", _interrupt)
    assert cli_main(["info", "--store", str(store)]) == 130
    assert _one_line(capsys.readouterr().err) == "hf-readonce info: interrupted."
    import hf_readonce.recipes.demo as demo

    monkeypatch.setattr(demo, "main", _interrupt)
    assert cli_main(["demo"]) == 130
    assert _one_line(capsys.readouterr().err) == "hf-readonce demo: interrupted."


def test_a_stopped_encode_counts_only_what_it_committed(tmp_path, checkpoint, qa_rows, capsys, monkeypatch):
    """Two `encode`s may write one store side by side (docs/store.md): the documents the other one commits to the same
    space while this one runs are not counted as this run's in its stopped line."""
    by_context = {}
    for row in qa_rows:
        by_context.setdefault(row["context"], row)
    rows = list(by_context.values())[:5]
    docs = write_jsonl(tmp_path / "docs.jsonl", rows[:3])
    store = tmp_path / "store"
    import hf_readonce.representations as representations

    fill_store = representations.fill_store

    def another_encode_commits_then_stop(adapter, store, documents, **kwargs):
        def mine_then_stop():
            yield from documents
            # another process encodes two other passages into the same space, then this run is stopped
            fill_store(adapter, RepresentationStore(store.path), [row["context"] for row in rows[3:]],
                       store_dtype="float32")
            raise KeyboardInterrupt
        return fill_store(adapter, store, mine_then_stop(), **{**kwargs, "documents_per_batch": 1})

    monkeypatch.setattr(representations, "fill_store", another_encode_commits_then_stop)
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 130
    line = _one_line(capsys.readouterr().err)
    assert len(RepresentationStore(store)) == 5
    assert line == ("hf-readonce encode: interrupted; committed shards are kept (3 document(s) encoded by this run), "
                    "re-run to finish."), line


def test_a_stopped_publish_says_nothing_was_written(tmp_path, checkpoint, capsys, monkeypatch):
    """`publish --local-dir` assembles the folder beside it and renames it into place when complete: stopped midway,
    nothing is there, no partial folder is left beside it, and the line says so."""
    import importlib

    publish = importlib.import_module("hf_readonce.hub.publish")  # (the package exports the function by that name)
    monkeypatch.setattr(publish, "_read_metrics_card", _interrupt)  # after the weights were written
    out = tmp_path / "parent" / "repo"
    assert cli_main(["publish", str(checkpoint), "--repo-id", "someone/tiny", "--local-dir", str(out),
                     "--max-passage-length", "64", "--doc-stride", "16", "--no-progress"]) == 130
    line = _one_line(capsys.readouterr().err)
    assert line == (f"hf-readonce publish: interrupted; nothing was written to --local-dir {out} (the folder being "
                    "assembled beside it was removed)."), line
    assert not (tmp_path / "parent").exists()


def test_a_publish_stopped_once_the_folder_is_in_place_says_it_was_written(tmp_path, checkpoint, capsys,
                                                                          monkeypatch):
    """Stopped after the repo folder was renamed into place (here while its summary line is printed, as when stdout
    is a pipe that blocks): the line says the folder was written, not that nothing was."""
    def print_or_stop(*args, **kwargs):
        if args and str(args[0]).startswith("wrote "):
            raise KeyboardInterrupt
        return print(*args, **kwargs)

    monkeypatch.setattr(cli, "print", print_or_stop, raising=False)
    out = tmp_path / "repo"
    assert cli_main(["publish", str(checkpoint), "--repo-id", "someone/tiny", "--local-dir", str(out),
                     "--max-passage-length", "64", "--doc-stride", "16", "--no-progress"]) == 130
    monkeypatch.undo()
    line = _one_line(capsys.readouterr().err)
    assert (out / "config.json").is_file()
    assert "nothing was written" not in line, line
    assert line == (f"hf-readonce publish: interrupted; the repo folder was written to --local-dir {out} before the "
                    "stop."), line


@pytest.mark.parametrize("module", ["httpx2._exceptions", "httpcore._exceptions", "huggingface_hub.errors"])
def test_an_unreachable_hub_on_upload_is_said_as_such(tmp_path, checkpoint, capsys, monkeypatch, module):
    """`publish` without `--local-dir` on a machine that cannot reach the Hub: huggingface_hub 2.x raises the errors
    of its HTTP client, `httpx2` (an `httpx2.ConnectError`, no `OSError`), which the command called an unexpected
    error ("please report it"); it is the Hub's error line, naming the network, `hf auth login` and --local-dir."""
    import huggingface_hub

    base = type("TransportError", (Exception,), {"__module__": module})
    connect_error = type("ConnectError", (base,), {"__module__": "somewhere_else"})  # known by its base class too

    class UnreachableHub:
        def __init__(self, *args, **kwargs):
            pass

        def create_repo(self, *args, **kwargs):
            raise connect_error("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "HfApi", UnreachableHub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert cli_main(["publish", str(checkpoint), "--repo-id", "someone/tiny", "--max-passage-length", "64",
                     "--doc-stride", "16", "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("hf-readonce publish: error: cannot upload to the Hub ([Errno -2] Name or service not "
                           "known"), line
    assert "hf auth login" in line and "--local-dir DIR" in line and "please report it" not in line, line


class _NoHub:
    """An `HfApi` that fails the test if the command reaches the Hub."""

    def __init__(self, *args, **kwargs):
        pass

    def create_repo(self, *args, **kwargs):
        raise AssertionError("the command reached the Hub")


@pytest.fixture
def no_hub(monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", _NoHub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def test_a_checkpoint_without_weights_is_not_called_a_hub_or_local_dir_problem(tmp_path, checkpoint, capsys, no_hub):
    """A checkpoint folder without its weights file: `publish` said "cannot upload to the Hub (Error no file named
    model.safetensors ...); check the network and your token" (and with --local-dir "cannot write the repo folder
    --local-dir ...; Pass a folder you can write to"), a local folder's problem told as the network's or the output
    folder's; it names the missing weights, with or without --local-dir."""
    import shutil

    model = tmp_path / "no-weights"
    shutil.copytree(checkpoint, model)
    (model / "model.safetensors").unlink()
    options = ["--repo-id", "someone/tiny", "--max-passage-length", "64", "--doc-stride", "16", "--no-progress"]
    for local_dir in ([], ["--local-dir", str(tmp_path / "out")]):
        assert cli_main(["publish", str(model), *options, *local_dir]) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"MODEL_DIR '{model}' has no loadable weights" in line, line
        assert "the Hub" not in line and "hf auth login" not in line and "a folder you can write to" not in line, line
        assert not (tmp_path / "out").exists()


def test_a_full_disk_while_assembling_the_upload_is_not_called_a_hub_problem(tmp_path, checkpoint, capsys, no_hub,
                                                                            monkeypatch):
    """Without --local-dir the repo folder is assembled in a temporary folder before the upload: a full disk there
    (an `OSError` of this machine) was "cannot upload to the Hub ([Errno 28] No space left on device ...); check the
    network and your token"; the line says it is a local error and where the folder is assembled."""
    import errno
    import tempfile

    import transformers

    def full_disk(self, folder, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder))

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full_disk)
    assert cli_main(["publish", str(checkpoint), "--repo-id", "someone/tiny", "--max-passage-length", "64",
                     "--doc-stride", "16", "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "No space left on device" in line and tempfile.gettempdir() in line and "TMPDIR" in line, line
    assert "check the network" not in line and "hf auth login" not in line, line


def test_a_config_field_of_the_wrong_type_is_not_called_a_hub_problem(tmp_path, checkpoint, capsys, no_hub):
    """transformers' configs validate their fields with huggingface_hub's strict dataclasses: a config.json field of
    the wrong type raises a `huggingface_hub.errors.StrictDataclassFieldValidationError`, which `publish` called a Hub
    upload failure ("check the network and your token") or, with --local-dir, an unexpected error ("please report
    it"); it is the checkpoint's problem, named in one line."""
    import json
    import shutil

    model = tmp_path / "bad-config"
    shutil.copytree(checkpoint, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "hidden_size": "x"}))
    for local_dir in ([], ["--local-dir", str(tmp_path / "out")]):
        assert cli_main(["publish", str(model), "--repo-id", "someone/tiny", "--no-progress", *local_dir]) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"MODEL_DIR '{model}' is not a loadable checkpoint" in line and "hidden_size" in line, line
        assert "the Hub" not in line and "please report it" not in line, line


def test_hub_errors_are_those_of_the_hub_client_and_its_http_stack():
    """`_is_hub_error`: the errors of huggingface_hub's HTTP clients (httpx2 over httpcore2 in huggingface_hub 2.x),
    of hf_xet (its upload client; a rejected token is an `XetAuthenticationError`, a `PermissionError`) and
    connection errors are the Hub's; a local `OSError` and huggingface_hub's strict-dataclass errors (a config.json
    field of the wrong type) are not."""
    import errno

    from huggingface_hub.errors import StrictDataclassFieldValidationError

    def error_of(module, base=Exception):
        return type("SomeError", (base,), {"__module__": module})("x")

    for module in ("httpx2._exceptions", "httpcore2._exceptions", "httpx", "requests.exceptions", "urllib3",
                   "hf_xet", "huggingface_hub.errors"):
        assert cli._is_hub_error(error_of(module)), module
    assert cli._is_hub_error(error_of("hf_xet", PermissionError))
    assert cli._is_hub_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert cli._is_hub_error(TimeoutError("timed out"))
    assert cli._is_hub_error(OSError(errno.ENETUNREACH, "Network is unreachable"))  # no ConnectionError subclass
    assert not cli._is_hub_error(OSError(errno.ENOSPC, "No space left on device"))
    assert not cli._is_hub_error(PermissionError(errno.EACCES, "Permission denied"))
    assert not cli._is_hub_error(StrictDataclassFieldValidationError("hidden_size", ValueError("expected int")))
    assert not cli._is_hub_error(KeyError("a programming error"))


# ---------------------------------------------------------------------------------------------- a file as MODEL
def test_a_file_given_as_model_is_named_by_every_command(tmp_path, checkpoint, qa_rows, capsys):
    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[:2])
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    capsys.readouterr()
    model = str(docs)
    for argv in (["encode", model, "--documents", model, "--store", str(tmp_path / "r3")],
                 ["answer", model, "--store", str(store), "--questions", model, "--output", str(tmp_path / "p")],
                 ["summarize", model, "--store", str(store), "--documents", model, "--output", str(tmp_path / "s")],
                 ["verify", "--store", str(store), "--recompute", "1", "--model", model],
                 ["publish", model, "--repo-id", "a/b", "--local-dir", str(tmp_path / "repo")],
                 ["demo", "--model", model]):
        if argv[0] == "demo":  # the demo stops as the other commands do, by SystemExit(2) from its own parser
            with pytest.raises(SystemExit) as stop:
                cli_main(argv)
            assert stop.value.code == 2
        else:
            assert cli_main(argv) == 2, argv
        line = _one_line(capsys.readouterr().err)
        assert f"model {model!r} is a file, not a checkpoint folder or Hub id" in line, line
        assert "JSON" not in line, line
    assert not (tmp_path / "r3").exists() and not (tmp_path / "repo").exists()


# ---------------------------------------------------------------------------------------------- counts, notes
def test_answer_encode_missing_says_how_many_it_encoded(tmp_path, checkpoint, qa_rows, capsys):
    rows = qa_rows[:5]
    questions = write_jsonl(tmp_path / "q.jsonl", rows)
    passages = len({r["context"] for r in rows})
    answer = ["answer", str(checkpoint), "--store", str(tmp_path / "new"), "--questions", str(questions), "--output",
              str(tmp_path / "p.jsonl"), "--no-progress", "--encode-missing", "--max-passage-length", "64",
              "--doc-stride", "16"]
    assert cli_main(answer) == 0
    out = capsys.readouterr().out
    assert (f"over {passages} stored passage(s) (--encode-missing encoded {passages} of these passages first) "
            in out), out
    assert cli_main(answer) == 0
    assert "(none missing: --encode-missing encoded nothing)" in capsys.readouterr().out
    assert cli_main(answer[:-5] + ["--max-passage-length", "64", "--doc-stride", "16"]) == 0  # without the option
    assert "--encode-missing" not in capsys.readouterr().out


def test_a_plain_encode_over_a_lost_index_says_repair_reindexes(tmp_path, checkpoint, qa_rows, capsys):
    """`rm -rf STORE/index` then `encode` (no --repair): the documents are computed again beside the old shards; a
    note says so first, and that `encode --repair` re-indexes them instead. Nothing is deleted."""
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:4])
    store = tmp_path / "store"
    encode = ["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
              "--max-passage-length", "64", "--doc-stride", "16"]
    assert cli_main(encode) == 0
    assert "note" not in capsys.readouterr().err
    shards = sorted((store / "shards").rglob("*.safetensors"))
    for manifest in (store / "index").glob("*.json"):
        manifest.unlink()
    assert cli_main(encode) == 0
    captured = capsys.readouterr()
    note = _one_line(captured.err)
    assert note.startswith(f"hf-readonce encode: note: {len(shards)} shard file(s) in this model's folder of {store}")
    assert "listed by no index entry" in note and "`hf-readonce encode ... --repair` re-indexes" in note, note
    assert all(shard.exists() for shard in shards)  # left as they were
    assert cli_main(encode) == 0  # the index lists what this run stored; the old shards are still orphans
    assert "note: " in capsys.readouterr().err
    assert cli_main(encode + ["--repair"]) == 0  # moves them to quarantine/: no note after
    capsys.readouterr()
    assert cli_main(encode) == 0
    assert "note" not in capsys.readouterr().err



def test_encode_repair_of_a_store_another_job_removed_empty_meanwhile(tmp_path, checkpoint, qa_rows, monkeypatch,
                                                                      capsys):
    """Another job had created the store and removes it again, empty, while `encode --repair` loads its model (the
    clean-up of a job that failed before storing anything): the repair finds nothing to repair, the store is created
    anew and the documents are encoded into it. It stopped saying the store had no write permission."""
    from hf_readonce.store.maintenance import remove_empty_store

    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:2])
    store = tmp_path / "store"
    RepresentationStore(store)  # the other job's
    real_load, removed = cli.load_qa_model, []

    def load_qa_model(*args, **kwargs):
        removed.append(remove_empty_store(store))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(cli, "load_qa_model", load_qa_model)
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16", "--repair"]) == 0
    err = capsys.readouterr().err
    assert removed == [True] and "Traceback" not in err and "permission" not in err, err
    assert "repair: verify found nothing to repair" in err, err
    assert len(RepresentationStore(store, create=False)) == len({row["context"] for row in qa_rows[:2]})


# ---------------------------------------------------------------------------------------------- mismatches
def test_a_deformer_store_of_another_k_is_said_without_contradiction(tmp_path, checkpoint, qa_rows, capsys):
    rows = qa_rows[:2]
    docs, questions = write_jsonl(tmp_path / "docs.jsonl", rows), write_jsonl(tmp_path / "q.jsonl", rows)
    common = ["--store", str(tmp_path / "store"), "--no-progress", "--max-passage-length", "64", "--doc-stride", "16"]
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), *common]) == 0
    capsys.readouterr()
    assert cli_main(["answer", str(checkpoint), "--questions", str(questions), "--output", str(tmp_path / "p"),
                     "--num-decomposed-layers", "3", *common[:3]]) == 2  # the windows looked up in the store
    line = _one_line(capsys.readouterr().err)
    assert "holds no DeFormer passage states of this model and tokenizer (num_decomposed_layers=3); " in line, line
    assert "it holds this tokenizer's DeFormer states with num_decomposed_layers=2, max_passage_length=64" in line
    assert "for this tokenizer;" not in line and "states only with" not in line, line


@pytest.mark.parametrize("command", ["answer", "verify"])
def test_a_store_of_another_compute_dtype_gets_the_specific_reason_alone(tmp_path, checkpoint, qa_rows, capsys,
                                                                        command):
    rows = qa_rows[:2]
    docs, questions = write_jsonl(tmp_path / "docs.jsonl", rows), write_jsonl(tmp_path / "q.jsonl", rows)
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16", "--compute-dtype", "bfloat16"]) == 0
    capsys.readouterr()
    argv = (["answer", str(checkpoint), "--questions", str(questions), "--output", str(tmp_path / "p"), "--store",
             str(store), "--no-progress"] if command == "answer" else
            ["verify", "--store", str(store), "--no-progress", "--recompute", "1", "--model", str(checkpoint)])
    assert cli_main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (f"hf-readonce {command}: error: store {store} holds this checkpoint's states computed in "
                    "bfloat16; this run computes in float32: pass --compute-dtype bfloat16 to read them, or encode "
                    "again with this compute dtype."), line


# ---------------------------------------------------------------------------------------------- newcomer's inputs
def test_verify_recompute_reports_the_documents_lines_it_set_aside(tmp_path, checkpoint, qa_rows, capsys):
    """`verify --recompute --documents` names the lines of the file it could not read, as `encode` and `answer` do
    (it left them out in silence); verify's exit status still speaks of the store alone."""
    import json

    rows = qa_rows[:2]
    docs = write_jsonl(tmp_path / "docs.jsonl", rows)
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    capsys.readouterr()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{not json\n" + json.dumps(rows[0]).encode() + b"\n" + b'{"context": "caf\xe9"}\n'
                    + json.dumps({"id": "x", "context": " "}).encode() + b"\n" + json.dumps(rows[1]).encode() + b"\n")
    for extra in ([], ["--json"]):
        assert cli_main(["verify", "--store", str(store), "--recompute", "2", "--model", str(checkpoint),
                         "--documents", str(bad), "--no-progress", *extra]) == 0
        out, err = capsys.readouterr()
        assert f"hf-readonce: {bad}: set aside 3 line(s):" in err, err
        assert "line 1: not valid JSON" in err and "line 3: not valid UTF-8" in err and "line 4: empty document" in err
        if extra:
            assert json.loads(out)["recompute"][0]["recomputed"] == 2, out  # stdout stays one JSON document
        else:
            assert "2 of 2 document(s) recomputed from text" in out, out


def test_a_setting_out_of_range_is_named_by_the_option_typed(tmp_path, checkpoint, qa_rows, capsys):
    """A family setting's range error names the option the user typed (`--max-passage-length`), not the Python field
    the library checks (`max_passage_length`); a value the checkpoint recorded, not typed, keeps the field's name."""
    import json

    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:1])
    encode = ["encode", str(checkpoint), "--documents", str(docs), "--store", str(tmp_path / "s"), "--no-progress"]
    for extra, said in ((["--num-decomposed-layers", "9"], "--num-decomposed-layers must be between 0 and "
                                                           "num_hidden_layers=4, got 9."),
                        (["--max-passage-length", "9999"], "--max-passage-length must be in [2, 128]"),
                        (["--max-passage=9999"], "--max-passage-length must be in [2, 128]"),  # an abbreviation
                        (["--max-passage-length", "64", "--doc-stride", "64"], "--doc-stride must be in [0, 63), got "
                                                                               "64.")):
        assert cli_main([*encode, *extra]) == 2, extra
        line = _one_line(capsys.readouterr().err)
        assert said in line and "_length`" not in line and "layers`" not in line and "stride`" not in line, line
    assert not (tmp_path / "s").exists()
    questions = write_jsonl(tmp_path / "q.jsonl", qa_rows[:1])
    assert cli_main(["answer", str(checkpoint), "--questions", str(questions), "--store", str(tmp_path / "s"),
                     "--output", str(tmp_path / "p.jsonl"), "--encode-missing", "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16", "--max-question-length", "2"]) == 2
    assert "error: --max-question-length must be >= 3, got 2." in _one_line(capsys.readouterr().err)
    recorded = tmp_path / "recorded"  # the checkpoint's own value: no option was typed, the field is named
    recorded.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (recorded / name).write_bytes((checkpoint / name).read_bytes())
    config = json.loads((recorded / "config.json").read_text())
    (recorded / "config.json").write_text(json.dumps({**config, "max_passage_length": 9999}))
    encode[1] = str(recorded)
    assert cli_main(encode) == 2
    line = _one_line(capsys.readouterr().err)
    assert "`max_passage_length` must be in [2, 128]" in line and "--max-passage-length 9999 (the checkpoint's)" in line
    assert cli._in_option_words("`mentions` (--mentions) must be one of", {"mentions": "--mentions"}) == \
        "--mentions must be one of"


def test_typed_options_are_read_from_the_parsers_own_record():
    """`_typed_options` names each option typed by its destination, from what the CLI's parsers recorded as they were
    built (`OneLineArgumentParser.commands` / `option_dests`), not from argparse's private attributes (`_actions`,
    `_SubParsersAction`, `_option_string_actions`, which argparse may rename): an abbreviation argparse accepted
    counts as its option, `--option=value` too, the parent's `--no-progress` and a family's own option are known,
    an ambiguous abbreviation is not, and nothing after `--` is read."""
    import ast
    import inspect

    parser = cli.build_parser(family_options=True)
    argv = ["encode", "m", "--max-passage=9", "--doc-stride", "3", "--no-prog", "--max", "x", "--", "--dtype", "fp32"]
    assert cli._typed_options(parser, "encode", argv) == {"max_passage_length": "--max-passage-length",
                                                           "doc_stride": "--doc-stride",
                                                           "no_progress": "--no-progress"}
    encode = parser.commands["encode"]
    assert encode.option_dests["--store"] == "store" and encode.option_dests["--help"] == "help"
    assert encode.option_dests["--no-progress"] == "no_progress"  # from the shared parent parser
    # the file and folder arguments, as an error the file system raises under one of them names it
    assert encode.path_arguments == {"model": "MODEL", "store": "--store", "documents": "--documents"}
    assert set(parser.commands) >= {"encode", "answer", "summarize", "info", "verify", "prune", "publish",
                                    "checkpoints", "demo"}
    group = encode.add_argument_group("more").add_argument("--toy-option", dest="toy")
    assert group.dest == "toy" and encode.option_dests["--toy-option"] == "toy"
    exclusive = encode.add_mutually_exclusive_group()
    exclusive.add_argument("--toy-a", action="store_true")
    assert encode.option_dests["--toy-a"] == "toy_a"
    # argparse's titled exclusive group: an exclusive group made from an argument group records its options too
    titled = encode.add_argument_group("titled").add_mutually_exclusive_group()
    titled.add_argument("--toy-b", action="store_true")
    assert encode.option_dests["--toy-b"] == "toy_b"
    assert cli._typed_options(parser, "encode", ["encode", "m", "--toy-b"]) == {"toy_b": "--toy-b"}
    private = ("_actions", "_SubParsersAction", "_option_string_actions")
    for module in (cli, __import__("hf_readonce.arguments", fromlist=["_"])):
        names = {node.attr for node in ast.walk(ast.parse(inspect.getsource(module)))
                 if isinstance(node, ast.Attribute)}
        assert not names & set(private), (module.__name__, names & set(private))


def _loading_command(command: str, model: str, tmp_path, checkpoint, qa_rows, capsys) -> list[str]:
    """The command line of `command` (encode, answer, summarize, verify --recompute) that loads `model`, over a store
    in `tmp_path / "store"` that `checkpoint` fills here with one Disfl-QA passage; `encode` writes to
    `tmp_path / "new"`, `answer` and `summarize` to `p.jsonl` / `s.jsonl` in `tmp_path`."""
    docs = write_jsonl(tmp_path / "docs.jsonl", qa_rows[:1])
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    capsys.readouterr()
    return {"encode": ["encode", model, "--documents", str(docs), "--store", str(tmp_path / "new")],
            "answer": ["answer", model, "--store", str(store), "--questions", str(docs), "--output",
                       str(tmp_path / "p.jsonl")],
            "summarize": ["summarize", model, "--store", str(store), "--documents", str(docs), "--text-field",
                          "context", "--output", str(tmp_path / "s.jsonl")],
            "verify": ["verify", "--store", str(store), "--recompute", "1", "--model", model]}[command]


@pytest.mark.parametrize("command", ["encode", "answer", "summarize", "verify"])
def test_a_config_without_model_type_says_what_to_add(tmp_path, checkpoint, qa_rows, capsys, command):
    """A checkpoint whose config.json records no model_type gets one line saying so and what to do, as the demo's
    does, not transformers' "Unrecognized model in ... Should have a `model_type` key"."""
    import json

    untyped = tmp_path / "untyped"
    untyped.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (untyped / name).write_bytes((checkpoint / name).read_bytes())
    config = json.loads((checkpoint / "config.json").read_text())
    model = str(untyped)
    argv = _loading_command(command, model, tmp_path, checkpoint, qa_rows, capsys)
    # with the `auto_map` a saved family model records (transformers then asks for remote code), and without it
    for drop in (("model_type",), ("model_type", "auto_map")):
        (untyped / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in drop}))
        assert cli_main([*argv, "--no-progress"]) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"cannot load model {model!r}: {untyped / 'config.json'} records no model_type" in line, line
        assert 'add to it the "model_type" of the model it holds (one of ' in line and "deformer_bert" in line, line
        assert "save_pretrained" in line and "Unrecognized" not in line, line
    assert not (tmp_path / "new").exists() and not (tmp_path / "p.jsonl").exists()


@pytest.mark.parametrize("command", ["encode", "answer", "summarize", "verify", "publish"])
def test_a_checkpoint_of_a_family_not_installed_asks_nothing(tmp_path, checkpoint, qa_rows, capsys, monkeypatch,
                                                             command):
    """A folder that carries its own model code (`auto_map`) for a model type no installed family registers: the
    command never runs that code nor asks whether to (transformers' "Do you wish to run the custom code? [y/N]",
    which waited on the terminal), and its one line says how a family of another package is installed."""
    import json

    folder = tmp_path / "other-family"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "someone_elses_family",
                                                    "auto_map": {"AutoConfig": "configuration_other.OtherConfig"}}))
    (folder / "configuration_other.py").write_text(
        "from transformers import PretrainedConfig\n\n\nclass OtherConfig(PretrainedConfig):\n"
        "    model_type = 'someone_elses_family'\n")
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "n")
    if command == "publish":
        argv = ["publish", str(folder), "--repo-id", "someone/other", "--local-dir", str(tmp_path / "out")]
    else:
        argv = _loading_command(command, str(folder), tmp_path, checkpoint, qa_rows, capsys)
    assert cli_main([*argv, "--no-progress"]) == 2
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert not asked and "custom code" not in captured.out + captured.err, (asked, captured)
    assert "'someone_elses_family'" in line and "`hf_readonce.families` entry point" in line, line
    assert not (tmp_path / "new").exists() and not (tmp_path / "out").exists()


def test_a_hub_checkpoint_of_a_family_not_installed_asks_nothing(tmp_path, capsys, monkeypatch):
    """A Hub checkpoint (here from the cache, offline) that carries its own model code for a model type no installed
    family registers: one line that says so and how a family of another package is installed, naming the family entry
    points that failed to load in this process; never "no such folder ... the Hub could not provide it", nor
    transformers' advice to pass `trust_remote_code=True` (which no command takes), nor its prompt."""
    import json

    from huggingface_hub import constants

    from hf_readonce.representations import registry

    snapshot = tmp_path / "hub" / "models--someone--other" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "someone_elses_family",
                                                      "auto_map": {"AutoConfig": "configuration_other.OtherConfig"}}))
    (snapshot / "configuration_other.py").write_text(
        "from transformers import PretrainedConfig\n\n\nclass OtherConfig(PretrainedConfig):\n"
        "    model_type = 'someone_elses_family'\n")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setitem(registry._ENTRY_POINT_FAILURES, "other", "other_family.family of the package other-family "
                                                                 "1.0: ImportError: broken")
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "n")
    assert cli_main(["info", "someone/other"]) == 2
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert not asked and "trust_remote_code" not in line and "no such folder" not in line, (asked, line)
    assert "carries its model's code" in line and "`hf_readonce.families` entry point" in line, line
    assert "'other' (other_family.family of the package other-family 1.0: ImportError: broken)" in line, line


@pytest.mark.parametrize("command", ["encode", "answer", "summarize", "verify"])
def test_a_config_field_of_the_wrong_type_is_the_checkpoints_error(tmp_path, checkpoint, qa_rows, capsys, command):
    """A config.json field of the wrong type (`"hidden_size": "x"`) makes transformers' config raise huggingface_hub's
    `StrictDataclassFieldValidationError`, which the loading commands called an unexpected error ("please report
    it"): it is one line naming the model and the field, exit status 2, and nothing is created."""
    import json
    import shutil

    bad = tmp_path / "bad-config"
    shutil.copytree(checkpoint, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "hidden_size": "x"}))
    model = str(bad)
    argv = _loading_command(command, model, tmp_path, checkpoint, qa_rows, capsys)
    assert cli_main([*argv, "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"cannot load model {model!r}" in line and "hidden_size" in line, line
    assert "please report it" not in line and "unexpected" not in line, line
    assert not (tmp_path / "new").exists() and not (tmp_path / "p.jsonl").exists() and not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("command", ["answer", "summarize"])
def test_output_help_says_missing_folders_are_created(command):
    """`--output a/new/folder/out.jsonl` creates the missing folders (and removes them when the command stops before
    writing the file): the option's help says so, and docs/cli.md, which lists it, too."""
    import argparse

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    output = next(a for a in commands[command]._actions if "--output" in a.option_strings)
    assert "missing folders of its path are created" in output.help
    assert "removed again if the command stops before writing it" in output.help


# ---------------------------------------------------------------------------------------------- --help
def _every_command_parser():
    """(name, parser) of every subcommand, the demo's own parser included (captured as the docs build does)."""
    import argparse
    import importlib.util

    from tests.conftest import REPO_ROOT

    parser = cli.build_parser(family_options=True)
    commands = dict(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO_ROOT / "utils" / "docs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    commands["demo"] = hooks._demo_parser()
    return commands


def test_every_option_with_a_default_states_it_in_its_help():
    """`encode --batch-size` (32) and the demo's `--batch-size`, `--learning-rate`, `--speed-rounds`, ... had a
    default that their help did not give: every option whose value is not None, False or empty when not given says
    "default" in its help, and a numeric default is the number its help states."""
    import argparse

    missing = []
    for name, parser in _every_command_parser().items():
        for action in parser._actions:
            if (not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
                    or action.help == argparse.SUPPRESS or action.default in (None, False, [], argparse.SUPPRESS)):
                continue
            if "default" not in (action.help or ""):
                missing.append(f"{name} {action.option_strings[0]} (default {action.default!r})")
            elif isinstance(action.default, (int, float)) and not isinstance(action.default, bool):
                # a number stated as the default is the parser's own (not one left behind by a changed default)
                stated = re.findall(r"default:? (\d[\d.e+-]*)", action.help)
                if not any(float(value.rstrip(".")) == action.default for value in stated):
                    missing.append(f"{name} {action.option_strings[0]} (default {action.default!r}, help {stated})")
    assert not missing, missing


def test_the_demo_shows_the_hyphenated_spelling_of_every_other_command(capsys):
    """`hf-readonce demo --help` showed `--data_dir`, `--no_progress`, `--max_eval_samples` while README.md, the demo's
    own description and every other command spell options with hyphens: the usage line and the option list now show
    the hyphenated spelling first (the underscore one, the training recipes', is still read)."""
    from hf_readonce.recipes import demo

    with pytest.raises(SystemExit):
        demo.main(["--help"])
    out = capsys.readouterr().out
    usage = out.split("\n\n")[0]
    assert "--data-dir" in usage and "--no-progress" in usage and "--max-eval-samples" in usage, usage
    assert not [option for option in re.findall(r"--[\w-]+", usage) if "_" in option], usage
    description = out.split("options:")[0]
    assert not re.search(r"`--[a-z]+_[a-z_]+", description), description


def test_the_demo_data_dir_help_gives_the_order_its_default_is_taken_in(monkeypatch, tmp_path):
    """`demo --data-dir` said "default ../shared/data or $HF_READONCE_DATA", the reverse of the order the default is
    taken in: the variable when set, else ../shared/data."""
    from hf_readonce.recipes import demo

    data_dir = next(a for a in _every_command_parser()["demo"]._actions if "--data-dir" in a.option_strings)
    assert "default: $HF_READONCE_DATA when set, else ../shared/data" in data_dir.help, data_dir.help
    monkeypatch.setenv("HF_READONCE_DATA", str(tmp_path))
    assert demo._default_data_dir() == str(tmp_path)
    monkeypatch.delenv("HF_READONCE_DATA")
    monkeypatch.chdir(tmp_path)
    assert demo._default_data_dir() == str(tmp_path.parent / "shared" / "data")


# ---------------------------------------------------------------------------------------------- which space is whose
def test_info_names_the_model_that_wrote_each_space(tmp_path, checkpoint, tokenizer, qa_rows, capsys, monkeypatch):
    """Two checkpoints of one family encoded into one store were told apart by fingerprint only, so a newcomer could
    not tell which space `prune --space` should get: `encode` records MODEL with the space (a local folder as its
    absolute path, or relative to the store when it lies beside it; a shipped name as typed) and `info` (and `prune
    --dry-run`) show it; a store written before names were recorded still reads, and `info` says how to find a
    model's spaces then."""
    import json
    import shutil

    from tests.conftest import REPO_ROOT, tiny_model

    second = tmp_path / "runs" / "second"
    tiny_model(seed=1).save_pretrained(second)
    tokenizer.save_pretrained(second)
    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[:2])
    store = tmp_path / "reps"
    window = ["--max-passage-length", "64", "--doc-stride", "16", "--no-progress"]
    monkeypatch.chdir(tmp_path)
    for model in (str(checkpoint), "runs/second"):  # the second as a path relative to the working directory
        assert cli_main(["encode", model, "--documents", str(docs), "--store", str(store), *window]) == 0
    capsys.readouterr()
    assert cli_main(["info", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    spaces = re.findall(r"^- space (\w+): .*\n    model (.*)$", out, flags=re.MULTILINE)
    assert sorted(name for _, name in spaces) == sorted([str(checkpoint), str(second)]), out
    assert "not recorded" not in out
    assert cli_main(["info", "--store", str(store), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["spaces"]
    assert sorted(space["model_names"] for space in listed.values()) == sorted([[str(checkpoint)],
                                                                               ["../runs/second"]])  # beside reps
    assert sorted(space["model_locations"] for space in listed.values()) == sorted([[str(checkpoint)], [str(second)]])
    key = next(key for key, name in spaces if name == str(second))
    assert cli_main(["prune", "--store", str(store), "--space", key, "--dry-run"]) == 0
    assert f"would delete space {key} (deformer_bert, model {second}, fingerprint " in capsys.readouterr().out
    assert cli._model_name("reference-deformer") == "reference-deformer"  # a shipped name, not its folder
    # a store of an earlier release: no name recorded; info says so and how to find a model's spaces
    shutil.copytree(REPO_ROOT / "tests" / "fixtures" / "v0_1_0" / "store", tmp_path / "old")
    assert cli_main(["info", "--store", str(tmp_path / "old")]) == 0
    out = capsys.readouterr().out
    assert out.count("    model not recorded\n") == 2, out
    assert f"`hf-readonce verify --store {tmp_path / 'old'} --recompute 1 --model MODEL` names the spaces" in out


# ---------------------------------------------------------------------------------------------- --dtype spelling
def test_the_storage_dtype_is_spelled_one_way_in_every_help(capsys):
    """`publish --dtype` showed {float16,bfloat16,float32} while `encode` and `summarize --dtype` showed
    {fp16,bf16,fp32}: every --dtype, and the error for a value none takes, now shows the spelling the docs use; the
    torch names are still read. `--store-dtype` is shown first, `--dtype` is the same option (one destination)."""
    import argparse

    parser = cli.build_parser(family_options=True)
    for name in ("encode", "answer", "summarize", "publish"):
        action = next(a for a in parser.commands[name]._actions if "--dtype" in a.option_strings)
        assert action.option_strings == ["--store-dtype", "--dtype"] and action.dest == "store_dtype", name
        assert action.metavar == "{fp16,bf16,fp32}", name
        assert not re.search(r"float|bfloat", action.help), (name, action.help)
        assert "--store-dtype {fp16,bf16,fp32}, --dtype {fp16,bf16,fp32}" in parser.commands[name].format_help(), name
        for given, read in (("fp16", "float16"), ("bf16", "bfloat16"), ("float32", "float32")):
            assert action.type(given) == read, (name, given)
    with pytest.raises(argparse.ArgumentTypeError) as error:
        cli._storage_dtype("float17")
    assert str(error.value) == "invalid choice: 'float17' (choose from fp16, bf16, fp32)"
    assert cli._storage_dtype_option("bfloat16") == "bf16"


# ---------------------------------------------------------------------------------------------- publish refuses first
def test_publish_refuses_a_non_empty_local_dir_before_any_output(tmp_path, capsys):
    """`publish reference-deformer --local-dir DIR` printed its "card results: ..." note, then refused DIR for not
    being empty: an error is the only line a refused command prints (the note comes once the folder is written)."""
    folder = tmp_path / "hub"
    folder.mkdir()
    (folder / "README.md").write_text("mine")
    assert cli_main(["publish", "reference-deformer", "--repo-id", "a/b", "--local-dir", str(folder),
                     "--no-progress"]) == 2
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert line.startswith("hf-readonce publish: error: `--local-dir`") and "not an empty directory" in line, line
    assert "card results" not in captured.err + captured.out and captured.out == ""
    assert (folder / "README.md").read_text() == "mine"


def test_publish_names_the_runs_metrics_file_its_card_leaves_out(tmp_path, checkpoint, capsys):
    """A run's folder (`hf-readonce demo --distill --output-dir DIR`, `run_deformer_qa.py`) holds its scores in
    `eval_results.json`; `publish DIR` without `--metrics` wrote a card saying "No evaluation was recorded" and said
    nothing. A note now names the file and the options that put its scores on the card, and those options do; a
    folder without scores gets no note."""
    import json
    import shlex
    import shutil

    run = tmp_path / "run"
    shutil.copytree(checkpoint, run)
    (run / "eval_results.json").write_text(json.dumps({"eval_exact_match": 30.5, "eval_f1": 41.25}))
    assert cli_main(["publish", str(run), "--repo-id", "someone/tiny", "--local-dir", str(tmp_path / "bare"),
                     *WINDOW]) == 0
    err = capsys.readouterr().err
    assert "No evaluation was recorded" in (tmp_path / "bare" / "README.md").read_text()
    note = next(line for line in err.splitlines() if line.startswith("card results: none"))
    assert str(run / "eval_results.json") in note, note
    options = shlex.split(re.search(r"`(--metrics [^`]*)`", note).group(1).replace("ID", "quoref"))
    assert cli_main(["publish", str(run), "--repo-id", "someone/tiny", "--local-dir", str(tmp_path / "scored"),
                     *options, *WINDOW]) == 0
    card = (tmp_path / "scored" / "README.md").read_text()
    assert "No evaluation was recorded" not in card and "value: 41.25" in card, card
    assert "card results" not in capsys.readouterr().err
    (run / "eval_results.json").write_text(json.dumps({"train_loss": 1.0}))  # no scores: nothing to name
    assert cli_main(["publish", str(run), "--repo-id", "someone/tiny", "--local-dir", str(tmp_path / "none"),
                     *WINDOW]) == 0
    assert "card results" not in capsys.readouterr().err


def _saved_model(folder, tokenizer):
    from tests.conftest import tiny_model

    tiny_model().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


WINDOW = ["--max-passage-length", "64", "--doc-stride", "16", "--no-progress"]


def test_a_store_copied_with_the_model_beside_it_names_the_copy(tmp_path, tokenizer, qa_rows, capsys):
    """`encode` recorded a local model folder by its absolute path, so a store copied or moved together with the
    model beside it (`cp -r work/ other/`) still named the folder it was copied from: `info --store` named the old
    folder, `info MODEL --store` of the copy did not know that the copy's space was recorded for it, `verify
    --recompute` did not say which model the space was recorded for, and after a move the name pointed nowhere,
    unsaid. A folder beside the store (under the store's parent) is now recorded relative to the store and read
    where the store is; a recorded folder that is not here is said, naming the commands that take the model; the
    space's key and fingerprint are as before."""
    import json
    import shutil

    work, other = tmp_path / "work", tmp_path / "other"
    _saved_model(work / "model", tokenizer)
    docs = write_jsonl(work / "docs.jsonl", qa_rows[:2])
    assert cli_main(["encode", str(work / "model"), "--documents", str(docs), "--store", str(work / "store"),
                     *WINDOW]) == 0
    (written,) = RepresentationStore(work / "store").spaces()
    shutil.copytree(work, other)
    capsys.readouterr()
    assert cli_main(["info", "--store", str(other / "store"), "--json"]) == 0
    (space,) = json.loads(capsys.readouterr().out)["spaces"].values()
    assert space["model_names"] == ["../model"] and space["model_locations"] == [str(other / "model")], space
    assert cli_main(["info", "--store", str(other / "store")]) == 0
    out = capsys.readouterr().out
    assert f"    model {other / 'model'}\n" in out and str(work) not in out and "no such folder" not in out, out
    # the copy holds the same space (key, fingerprint): encode of the copied model finds every document stored
    assert [(s.key, s.fingerprint) for s in RepresentationStore(other / "store").spaces()] == [
        (written.key, written.fingerprint)]
    assert cli_main(["encode", str(other / "model"), "--documents", str(other / "docs.jsonl"), "--store",
                     str(other / "store"), *WINDOW]) == 0
    assert "encoded 0 document(s)" in capsys.readouterr().out
    # `answer --encode-missing` records the model beside its store as `encode` does
    questions = write_jsonl(other / "q.jsonl", qa_rows[:1])
    assert cli_main(["answer", str(other / "model"), "--store", str(other / "answered"), "--questions",
                     str(questions), "--output", str(other / "p.jsonl"), "--encode-missing", *WINDOW]) == 0
    assert [space["model_names"] for space in RepresentationStore(other / "answered").info()["spaces"].values()] == [
        ["../model"]]
    # the copied model changed in place since (trained further): the space is said to be recorded for it
    config = json.loads((other / "model" / "config.json").read_text())
    (other / "model" / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-5}))
    assert cli_main(["info", str(other / "model"), "--store", str(other / "store"), *WINDOW]) == 1
    assert "though encode recorded this model for it (its weights or config changed since?)" in \
        capsys.readouterr().out
    verify = ["verify", "--recompute", "1", "--model", str(other / "model"), "--no-progress", "--store"]
    assert cli_main([*verify, str(other / "store")]) == 2
    err = capsys.readouterr().err
    assert f"fingerprint {written.fingerprint[:16]}..., model {other / 'model'})); pass the checkpoint" in err, err
    assert (f"encode recorded {other / 'model'} for space {written.key[:16]}, but its fingerprint is not that "
            "model's now") in err, err
    # the store moved without its model: the recorded folder is not here, said with the commands that take one
    (tmp_path / "elsewhere").mkdir()
    shutil.move(work / "store", tmp_path / "elsewhere" / "store")
    assert cli_main(["info", "--store", str(tmp_path / "elsewhere" / "store")]) == 0
    out = capsys.readouterr().out
    assert f"    model {tmp_path / 'elsewhere' / 'model'}\n    no such folder here: " in out, out
    assert "note: a model folder recorded for a space is not here" in out and "--model MODEL` recomputes" in out
    assert cli_main([*verify, str(tmp_path / "elsewhere" / "store")]) == 2
    assert f"model {tmp_path / 'elsewhere' / 'model'} (no such folder here))" in capsys.readouterr().err


def test_a_store_reached_through_a_link_names_the_model_the_file_system_finds(tmp_path, tokenizer, qa_rows, capsys):
    """`../model` read from a store folder that is a symbolic link is, for the file system, beside the link's
    target, not beside the link: a model beside a linked store (`work/store -> data/store`) was recorded as
    `../model` and `info --store data/store` said `no such folder here: data/model` (an absolute path, as before,
    named it from both). It is recorded by its absolute path; and a store recorded relative to it that is opened
    through a link elsewhere (`elsewhere/link -> other/store`) names the model beside its target."""
    import json
    import os
    import shutil

    work, data, other, elsewhere = (tmp_path / name for name in ("work", "data", "other", "elsewhere"))
    _saved_model(work / "model", tokenizer)
    (data / "store").mkdir(parents=True)
    elsewhere.mkdir()
    try:
        (work / "store").symlink_to(data / "store", target_is_directory=True)
    except OSError:
        pytest.skip("no symbolic links on this file system")
    docs = write_jsonl(work / "docs.jsonl", qa_rows[:1])
    assert cli_main(["encode", str(work / "model"), "--documents", str(docs), "--store", str(work / "store"),
                     *WINDOW]) == 0
    capsys.readouterr()
    for store in (work / "store", data / "store"):
        assert cli_main(["info", "--store", str(store), "--json"]) == 0
        (space,) = json.loads(capsys.readouterr().out)["spaces"].values()
        assert space["model_names"] == space["model_locations"] == [str(work / "model")], space
    # a store beside its model (recorded as `../model`), copied, then opened through a link to the copy
    (work / "store").unlink()
    assert cli_main(["encode", str(work / "model"), "--documents", str(docs), "--store", str(work / "store"),
                     *WINDOW]) == 0
    shutil.copytree(work, other)
    (elsewhere / "link").symlink_to(other / "store", target_is_directory=True)
    capsys.readouterr()
    assert cli_main(["info", "--store", str(elsewhere / "link"), "--json"]) == 0
    (space,) = json.loads(capsys.readouterr().out)["spaces"].values()
    assert space["model_names"] == ["../model"] and space["model_locations"] == [
        os.path.realpath(other / "model")], space  # (beside the link's target, as the file system finds it)
    assert cli_main(["info", "--store", str(elsewhere / "link")]) == 0
    assert "no such folder" not in capsys.readouterr().out


def test_a_model_recorded_by_its_absolute_path_reads_as_before(tmp_path, tokenizer, qa_rows, capsys):
    """A space whose model is recorded by its absolute path (as `encode` recorded every local folder before, or a
    folder not beside the store) is listed by that path after the store is copied, with the same key and
    fingerprint; `encode` of the same model beside the store adds its relative name to the same space (listed once
    while both name one folder); a recorded folder that is gone is said."""
    import json
    import shutil

    from hf_readonce import DeformerBertForQuestionAnswering
    from hf_readonce.representations import fill_store, get_adapter

    work, other = tmp_path / "work", tmp_path / "other"
    model = _saved_model(work / "model", tokenizer)
    docs = write_jsonl(work / "docs.jsonl", qa_rows[:2])
    loaded = DeformerBertForQuestionAnswering.from_pretrained(model).eval()
    adapter = get_adapter(loaded, tokenizer, max_passage_length=64, doc_stride=16)
    fill_store(adapter, RepresentationStore(work / "store"), [row["context"] for row in qa_rows[:2]],
               model_name=str(model))  # the record of an earlier release
    (written,) = RepresentationStore(work / "store").spaces()
    assert cli_main(["encode", str(model), "--documents", str(docs), "--store", str(work / "store"), *WINDOW]) == 0
    assert "encoded 0 document(s)" in capsys.readouterr().out  # the same space
    assert cli_main(["encode", str(model), "--documents", str(docs), "--store", str(work / "store"), *WINDOW,
                     "--dtype", "fp32"]) == 0  # (the same space: a stored document is not written again)
    capsys.readouterr()
    assert cli_main(["info", "--store", str(work / "store"), "--json"]) == 0
    (space,) = json.loads(capsys.readouterr().out)["spaces"].values()
    assert space["model_names"] == [str(model)] and space["model_locations"] == [str(model)]
    shutil.copytree(work, other)
    for store in (work / "store", other / "store"):
        assert [(s.key, s.fingerprint) for s in RepresentationStore(store).spaces()] == [
            (written.key, written.fingerprint)]
        assert cli_main(["info", "--store", str(store)]) == 0
        out = capsys.readouterr().out
        assert f"    model {model}\n" in out and "no such folder" not in out, out
    shutil.rmtree(model)
    assert cli_main(["info", "--store", str(other / "store")]) == 0
    out = capsys.readouterr().out
    assert f"    model {model}\n    no such folder here: {model}\n" in out, out
    # a document encoded by the copy beside the copied store adds the relative name to the same space
    more = write_jsonl(other / "more.jsonl", qa_rows[2:3])
    assert cli_main(["encode", str(other / "model"), "--documents", str(more), "--store", str(other / "store"),
                     *WINDOW]) == 0
    capsys.readouterr()
    assert cli_main(["info", "--store", str(other / "store"), "--json"]) == 0
    (space,) = json.loads(capsys.readouterr().out)["spaces"].values()
    assert space["model_names"] == [str(model), "../model"], space
    assert space["model_locations"] == [str(model), str(other / "model")], space


def test_prune_dry_run_names_every_model_info_lists_for_the_space(tmp_path, capsys):
    """`prune --dry-run` named the model of whichever of a space's shards was loaded first, so a space two writers
    wrote (a checkpoint and its copy, the second shard the first without a name as an earlier release wrote it) was
    named by one model or none while `info` listed both: it names the models `info` lists."""
    import torch

    from hf_readonce.store import content_hash, space_key

    fingerprint, settings = "f" * 64, {"max_passage_length": 64}
    store = RepresentationStore(tmp_path / "s")
    for text, name in (("one", None), ("two", "/runs/a"), ("three", "/copies/a")):
        store.put(fingerprint, settings, content_hash(text), {"h": torch.ones(2, 2)}, model_name=name)
    key = space_key(fingerprint, settings)[:16]
    assert cli_main(["info", "--store", str(tmp_path / "s")]) == 0
    assert "    models /runs/a, /copies/a\n" in capsys.readouterr().out
    assert cli_main(["prune", "--store", str(tmp_path / "s"), "--space", key, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would delete space {key} (model type not recorded, models /runs/a, /copies/a, fingerprint ffff" in out, \
        out


def test_answer_encode_missing_names_the_model_as_encode_does(tmp_path, checkpoint, qa_rows, capsys, monkeypatch):
    """`answer --encode-missing` wrote its spaces under the model's `config.name_or_path`, the path as typed (relative:
    no name from another directory), so `info` listed one checkpoint under two names once `encode` had added to the
    space: both record MODEL as `encode` does (a local folder as its absolute path)."""
    import json

    window = ["--max-passage-length", "64", "--doc-stride", "16", "--no-progress"]
    questions = write_jsonl(tmp_path / "q.jsonl", qa_rows[:2])
    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[2:4])
    store = tmp_path / "reps"
    monkeypatch.chdir(checkpoint.parent)
    assert cli_main(["answer", checkpoint.name, "--store", str(store), "--questions", str(questions), "--output",
                     str(tmp_path / "o.jsonl"), "--encode-missing", *window]) == 0
    assert cli_main(["encode", checkpoint.name, "--documents", str(docs), "--store", str(store), *window]) == 0
    capsys.readouterr()
    assert cli_main(["info", "--store", str(store), "--json"]) == 0
    spaces = json.loads(capsys.readouterr().out)["spaces"]
    assert [space["model_names"] for space in spaces.values()] == [[str(checkpoint)]], spaces


# ---------------------------------------------------------------------------------------------- unreadable input
def test_an_unreadable_input_file_is_named_by_its_option(tmp_path, checkpoint, qa_rows, capsys, monkeypatch):
    """A `--documents` / `--questions` file without read permission stops each command with one line naming the
    option and the file, before a store or an output is created (a root user passes chmod, so the refusal of the
    file system is simulated for that one path)."""
    import builtins

    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[:2])
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    capsys.readouterr()
    locked = write_jsonl(tmp_path / "locked.jsonl", qa_rows[:2])
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    new_store, output = tmp_path / "new_store", tmp_path / "out" / "p.jsonl"
    for option, argv in (
            ("--documents", ["encode", str(checkpoint), "--documents", str(locked), "--store", str(new_store)]),
            ("--questions", ["answer", str(checkpoint), "--store", str(store), "--questions", str(locked),
                             "--output", str(output)]),
            ("--documents", ["summarize", str(checkpoint), "--store", str(store), "--documents", str(locked),
                             "--output", str(output)]),
            ("--documents", ["verify", "--store", str(store), "--recompute", "1", "--model", str(checkpoint),
                             "--documents", str(locked)])):
        assert cli_main([*argv, "--no-progress"]) == 2, argv
        line = _one_line(capsys.readouterr().err)
        assert f"{option} {locked} cannot be read (Permission denied)" in line, line
        assert "unexpected" not in line, line
    assert not new_store.exists() and not output.parent.exists()


@pytest.mark.parametrize("refused", ["folder", "shards"])
def test_a_store_the_user_may_not_read_is_named_by_store(tmp_path, checkpoint, qa_rows, capsys, monkeypatch, refused):
    """A store whose folder, or whose shards/ folder, the user may not read (a store of another user, `chmod 000`)
    stops every command that reads it with one line naming `--store` and the file refused, and leaves the store as
    it was. A root user passes chmod, so the refusal is simulated: what the file system refuses in such a folder
    (the status of the files in it, listing it) raises `PermissionError` for those paths alone."""
    import os
    from pathlib import Path

    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[:2])
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    capsys.readouterr()
    before = sorted((p.relative_to(store), p.stat().st_size) for p in store.rglob("*") if p.is_file())
    locked = store if refused == "folder" else store / "shards"
    real = {name: getattr(os, name) for name in ("stat", "lstat", "scandir", "listdir")}

    def refusing(name):
        def call(path=".", *args, **kwargs):
            where = Path(os.fsdecode(path)).absolute() if not isinstance(path, int) else None
            inside = where is not None and locked in where.parents
            if inside or (name in ("scandir", "listdir") and where == locked):
                raise PermissionError(13, "Permission denied", os.fsdecode(path))
            return real[name](path, *args, **kwargs)
        return call

    for name in real:
        monkeypatch.setattr(os, name, refusing(name))
    output = tmp_path / "p.jsonl"
    for argv in (["info", "--store", str(store)],
                 ["verify", "--store", str(store)],
                 ["prune", "--store", str(store), "--space", "0000"],
                 ["encode", str(checkpoint), "--documents", str(docs), "--store", str(store)],
                 ["answer", str(checkpoint), "--store", str(store), "--questions", str(docs), "--output",
                  str(output)]):
        if refused == "shards" and argv[0] == "answer":
            continue  # answer opens the shards it needs by name: a shard it cannot read is named as such
        assert cli_main([*argv, "--no-progress"]) == 2, argv
        line = _one_line(capsys.readouterr().err)
        assert f"error: --store {store}: Permission denied on {locked}" in line, line
        assert "unexpected" not in line, line
    monkeypatch.undo()
    assert sorted((p.relative_to(store), p.stat().st_size) for p in store.rglob("*") if p.is_file()) == before
    assert not output.exists()


def test_a_refused_file_is_named_by_the_nearest_path_given(tmp_path, checkpoint, qa_rows, capsys, monkeypatch):
    """A file refused under two of the paths given (a store kept inside the model's folder) is named by the nearest
    one, `--store`, not MODEL; one under none of them (a cache file) is named alone, by no option. A root user passes
    chmod, so the refusal of the file system is simulated for the paths under shards/ alone."""
    import os
    import shutil
    from pathlib import Path

    model = tmp_path / "model"
    shutil.copytree(checkpoint, model)
    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[:2])
    store = model / "reps"
    assert cli_main(["encode", str(model), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    capsys.readouterr()
    shards = store / "shards"
    real = {name: getattr(os, name) for name in ("stat", "lstat", "scandir", "listdir")}

    def refusing(name):
        def call(path=".", *args, **kwargs):
            where = Path(os.fsdecode(path)).absolute() if not isinstance(path, int) else None
            if where is not None and (shards in where.parents or (name in ("scandir", "listdir") and where == shards)):
                raise PermissionError(13, "Permission denied", os.fsdecode(path))
            return real[name](path, *args, **kwargs)
        return call

    with monkeypatch.context() as patch:
        for name in real:
            patch.setattr(os, name, refusing(name))
        assert cli_main(["encode", str(model), "--documents", str(docs), "--store", str(store), "--no-progress",
                         "--max-passage-length", "64", "--doc-stride", "16"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"error: --store {store}: Permission denied on {shards}" in line, line
    assert "MODEL" not in line, line
    cached = tmp_path / "cache" / "lock"

    def refused(name):
        raise PermissionError(13, "Permission denied", str(cached))

    monkeypatch.setattr(cli, "_resolve_model", refused)
    assert cli_main(["encode", str(model), "--documents", str(docs), "--store", str(store), "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"error: Permission denied: {cached}; run the command as a user who may read" in line, line


def test_publish_metrics_given_a_folder_says_it_is_a_folder(tmp_path, checkpoint, capsys):
    """`--metrics` naming a folder (e.g. the training run's output folder instead of its eval_results.json) is said
    to be a folder, not a file that does not exist; nothing is written."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval_results.json").write_text('{"eval_f1": 50.0}')
    repo = tmp_path / "repo"
    assert cli_main(["publish", str(checkpoint), "--repo-id", "a/b", "--local-dir", str(repo), "--metrics", str(run),
                     "--dataset-type", "squad", "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"`--metrics` '{run}' is a directory; pass the metrics JSON file itself" in line, line
    assert "does not exist" not in line, line
    assert not repo.exists()


# ---------------------------------------------------------------------------------------------- out of memory
def test_running_out_of_memory_names_the_options_that_size_the_batches(tmp_path, checkpoint, qa_rows, capsys,
                                                                      monkeypatch):
    """An allocation that fails (a `--batch-size` or `--num-beams` far beyond the machine's memory; torch's CPU
    allocator raises a `RuntimeError`) is one line saying so, with how much was asked for and the options given that
    size the batches, not an unexpected error; an existing `--output` is left as it was."""
    import torch

    from hf_readonce import DeformerBertForQuestionAnswering

    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[:2])
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--max-passage-length", "64", "--doc-stride", "16"]) == 0
    output = tmp_path / "preds.jsonl"
    output.write_text("kept\n")
    capsys.readouterr()

    def exhausted(self, *args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 48835200000 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(DeformerBertForQuestionAnswering, "forward", exhausted)
    answer = ["answer", str(checkpoint), "--store", str(store), "--questions", str(docs), "--output", str(output),
              "--no-progress"]
    assert cli_main([*answer, "--batch-size", "4096"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "error: out of memory (it tried to allocate 45.5 GiB); --batch-size 4096 asked for more" in line, line
    assert "unexpected" not in line, line
    assert cli_main(answer) == 2  # no option given: the one that sizes the batches is suggested
    assert "out of memory (it tried to allocate 45.5 GiB); pass a smaller --batch-size." in capsys.readouterr().err
    assert output.read_text() == "kept\n"
    # CUDA's allocator says it with a capital T, in GiB; Windows' CPU allocator says "not enough memory"
    for error, amount in ((torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
                                                  "capacity of 139.72 GiB of which 1.20 GiB is free."), "20.00 GiB"),
                          (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough "
                                        "memory: you tried to allocate 48835200000 bytes."), "45.5 GiB")):
        def failing(self, *args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(DeformerBertForQuestionAnswering, "forward", failing)
        assert cli_main(answer) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"error: out of memory (it tried to allocate {amount}); pass a smaller --batch-size." in line, line
    assert output.read_text() == "kept\n"


# ---------------------------------------------------------------------------------------------- empty paths
def test_an_empty_path_is_refused_instead_of_naming_the_current_folder(tmp_path, checkpoint, qa_rows, capsys,
                                                                       monkeypatch):
    """`--store "$STORE"` with the variable unset gives an empty path, which would name the current folder: an empty
    one would become a store (or a published repo) without a word. Every argument naming a file or folder refuses
    it by name, and the current folder stays empty."""
    docs = write_jsonl(tmp_path / "passages.jsonl", qa_rows[:2])
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for argv, name in ((["encode", str(checkpoint), "--documents", str(docs), "--store", ""], "--store"),
                       (["encode", "", "--documents", str(docs), "--store", str(tmp_path / "s")], "model"),
                       (["publish", str(checkpoint), "--repo-id", "a/b", "--local-dir", ""], "--local-dir"),
                       (["answer", str(checkpoint), "--store", str(tmp_path / "s"), "--questions", str(docs),
                         "--output", " "], "--output"),
                       (["info", "--store", ""], "--store"),
                       (["verify", "--store", str(tmp_path / "s"), "--recompute", "1", "--model", ""], "--model")):
        with pytest.raises(SystemExit) as stop:  # argparse's usage error
            cli_main([*argv, "--no-progress"])
        assert stop.value.code == 2, argv
        line = _one_line(capsys.readouterr().err)
        assert f"error: argument {name}: expected a path, got" in line, line
    assert list(here.iterdir()) == [] and not (tmp_path / "s").exists()
