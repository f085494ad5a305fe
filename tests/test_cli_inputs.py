"""What the CLI blames and how it names what it reads: an `OSError` of a file outside the store (a model's, a
tokenizer's, the Hugging Face cache's) named as that file, not as the store's; JSON files a user gives read as UTF-8
with a byte order mark tolerated; a missing, a directory and a non-file input said alike for every input option; a
negative number in scientific notation after an option; and suggested commands quoted so that they can be pasted."""

import errno
from pathlib import Path

import pytest
import torch

from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationStore
from tests.conftest import write_jsonl

QUESTIONS = [{"id": "q1", "question": "Where did the cat sit?", "context": "The cat sat on the mat in the hall."},
             {"id": "q2", "question": "What sat?", "context": "The cat sat on the mat in the hall."}]
WINDOWS = ["--max-question-length", "16", "--max-passage-length", "32", "--doc-stride", "8"]


def _error_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(f"hf-readonce {command}: error:")]
    assert "Traceback" not in err and len(errors) == 1, err
    return errors[0]


def _failing_embedding(monkeypatch, error: OSError) -> None:
    """Every embedding lookup (the first step of a model's forward) raises `error`."""

    def forward(self, *args, **kwargs):
        raise error

    monkeypatch.setattr(torch.nn.Embedding, "forward", forward)


# ------------------------------------------------------------------------------------------ who an OSError blames
@pytest.fixture(scope="module")
def encoded(tmp_path_factory, checkpoint):
    path = tmp_path_factory.mktemp("encoded")
    docs = write_jsonl(path / "q.jsonl", QUESTIONS)
    assert cli_main(["encode", str(checkpoint), "--store", str(path / "s"), "--documents", str(docs),
                     "--no-progress", *WINDOWS[2:]]) == 0
    return path


@pytest.mark.parametrize("named", [True, False], ids=["a-file-outside-the-store", "no-file-named"])
def test_answer_does_not_blame_the_store_for_another_files_error(tmp_path, checkpoint, encoded, monkeypatch,
                                                                 capsys, named):
    """An `OSError` raised while the model answers (here from its forward; in use a tokenizer file or the Hugging
    Face cache) names its own file, or none, never `store PATH:`; the store is untouched and no output written."""
    cache = tmp_path / "hf-cache" / "tokenizer.json"
    error = (OSError(errno.EIO, "Input/output error", str(cache)) if named
             else OSError(errno.EIO, "Input/output error"))
    before = len(RepresentationStore(encoded / "s", readonly=True))
    _failing_embedding(monkeypatch, error)
    output = tmp_path / "p.jsonl"
    status = cli_main(["answer", str(checkpoint), "--store", str(encoded / "s"), "--questions",
                       str(encoded / "q.jsonl"), "--output", str(output), "--no-progress", *WINDOWS])
    line = _error_line(capsys.readouterr().err, "answer")
    assert status == 2
    assert "store " not in line and str(encoded / "s") not in line, line
    assert "cannot answer the questions: Input/output error" in line, line
    assert (str(cache) in line) == named, line
    monkeypatch.undo()
    assert len(RepresentationStore(encoded / "s", readonly=True)) == before and not output.exists()


def test_answer_blames_the_store_for_its_own_files(tmp_path, checkpoint, encoded, monkeypatch, capsys):
    """An `OSError` naming a file inside the store (here a shard that cannot be read) is the store's: said with the
    store's path."""
    shard = next((encoded / "s" / "shards").rglob("*.safetensors"))
    _failing_embedding(monkeypatch, OSError(errno.EIO, "Input/output error", str(shard)))
    status = cli_main(["answer", str(checkpoint), "--store", str(encoded / "s"), "--questions",
                       str(encoded / "q.jsonl"), "--output", str(tmp_path / "p.jsonl"), "--no-progress", *WINDOWS])
    line = _error_line(capsys.readouterr().err, "answer")
    assert status == 2 and f"store {encoded / 's'}: Input/output error: {shard}" in line, line


def test_encode_does_not_say_it_cannot_write_the_store_for_a_models_error(tmp_path, checkpoint, monkeypatch,
                                                                           capsys):
    """`encode`: an `OSError` of the model's forward is not "cannot write to store"; it names its file."""
    docs = write_jsonl(tmp_path / "d.jsonl", QUESTIONS)
    weights = tmp_path / "elsewhere" / "weights.bin"
    _failing_embedding(monkeypatch, OSError(errno.EIO, "Input/output error", str(weights)))
    status = cli_main(["encode", str(checkpoint), "--store", str(tmp_path / "s"), "--documents", str(docs),
                       "--no-progress", *WINDOWS[2:]])
    line = _error_line(capsys.readouterr().err, "encode")
    assert status == 2 and "cannot write to store" not in line, line
    assert f"cannot encode: Input/output error: {weights}" in line, line


def test_summarize_does_not_blame_the_store_for_another_files_error(tmp_path, tokenizer, monkeypatch, capsys):
    """`summarize --encode-missing`: an `OSError` of the model's forward names its file, not the store, and the
    store this run created (empty) is removed as for any other failure."""
    from tests.tasks.test_summarization_store import longdoc

    model = tmp_path / "longdoc"
    longdoc(tokenizer).save_pretrained(model)
    tokenizer.save_pretrained(model)
    docs = write_jsonl(tmp_path / "d.jsonl", [{"id": "d", "document": "The cat sat on the mat in the hall."}])
    cache = tmp_path / "hf-cache" / "generation_config.json"
    _failing_embedding(monkeypatch, OSError(errno.EIO, "Input/output error", str(cache)))
    status = cli_main(["summarize", str(model), "--store", str(tmp_path / "s"), "--documents", str(docs),
                       "--output", str(tmp_path / "out.jsonl"), "--encode-missing", "--max-new-tokens", "2",
                       "--no-progress"])
    line = _error_line(capsys.readouterr().err, "summarize")
    assert status == 2 and "store " not in line, line
    assert f"cannot summarize the documents: Input/output error: {cache}" in line, line
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------------ JSON files read as UTF-8
def test_publish_reads_a_metrics_file_with_a_byte_order_mark(tmp_path, capsys):
    """`--metrics` saved by an editor that writes a UTF-8 byte order mark (Notepad) is read as the same JSON; the
    published `representation_format.json`, rewritten so, is read too."""
    import codecs
    import json

    from hf_readonce.store.format_check import load_representation_format

    metrics = tmp_path / "eval_results.json"
    metrics.write_bytes(codecs.BOM_UTF8 + json.dumps({"eval_exact_match": 12.5, "eval_f1": 20.25}).encode())
    repo = tmp_path / "repo"
    assert cli_main(["publish", "reference-deformer", "--repo-id", "someone/deformer", "--local-dir", str(repo),
                     "--metrics", str(metrics), "--dataset-type", "quoref", "--no-progress"]) == 0, \
        capsys.readouterr().err
    assert "| quoref, validation | F1 | **20.25** |" in (repo / "README.md").read_text(encoding="utf-8")
    fmt = repo / "representation_format.json"
    expected = load_representation_format(fmt)
    fmt.write_bytes(codecs.BOM_UTF8 + fmt.read_bytes())
    assert load_representation_format(fmt) == expected


def test_a_model_config_with_a_byte_order_mark_is_named_as_such(tmp_path, checkpoint, capsys):
    """transformers reads config.json as UTF-8 without a byte order mark (one saved so is "not a valid JSON file" to
    it): the CLI names the mark instead of calling a readable JSON file invalid, and writes no store."""
    import codecs
    import shutil

    model = tmp_path / "model"
    shutil.copytree(checkpoint, model)
    config = model / "config.json"
    config.write_bytes(codecs.BOM_UTF8 + config.read_bytes())
    docs = write_jsonl(tmp_path / "d.jsonl", QUESTIONS)
    status = cli_main(["encode", str(model), "--store", str(tmp_path / "s"), "--documents", str(docs),
                       "--no-progress"])
    line = _error_line(capsys.readouterr().err, "encode")
    assert status == 2 and f"{config} starts with a UTF-8 byte order mark" in line, line
    assert not (tmp_path / "s" / "store.json").exists()


# ------------------------------------------------------------------------------------------ input files said alike
@pytest.mark.parametrize("command, option", [("encode", "--documents"), ("answer", "--questions"),
                                             ("summarize", "--documents")])
@pytest.mark.parametrize("case", ["missing", "directory"])
def test_an_input_file_that_is_not_there_is_said_alike(tmp_path, command, option, case, capsys):
    """Each input option says a missing file and a folder in the same words, before any model is loaded and
    without creating the store or the output."""
    path = tmp_path / ("absent.jsonl" if case == "missing" else "folder")
    if case == "directory":
        path.mkdir()
    argv = [command, "no-such-model", option, str(path), "--store", str(tmp_path / "s"), "--no-progress"]
    if command != "encode":
        argv += ["--output", str(tmp_path / "out.jsonl")]
    assert cli_main(argv) == 2
    line = _error_line(capsys.readouterr().err, command)
    said = "does not exist." if case == "missing" else "is a directory, expected a JSONL file."
    assert line.endswith(f"error: {option} {path} {said}"), line
    assert not (tmp_path / "s").exists() and not (tmp_path / "out.jsonl").exists()


def test_a_questions_pipe_is_not_a_regular_file(tmp_path, capsys):
    """`answer` takes a regular --questions file: a FIFO is refused as not a regular file (not as missing), without
    blocking on it."""
    import os

    fifo = tmp_path / "q.fifo"
    os.mkfifo(fifo)
    assert cli_main(["answer", "no-such-model", "--questions", str(fifo), "--store", str(tmp_path / "s"),
                     "--output", str(tmp_path / "out.jsonl"), "--no-progress"]) == 2
    line = _error_line(capsys.readouterr().err, "answer")
    assert line.endswith(f"error: --questions {fifo} is not a regular file, expected a JSONL file."), line


def _failing_reads(monkeypatch, path, lines_read: int) -> None:
    """The JSONL reader gets the first `lines_read` lines of `path`, then an I/O error that names no file, as a read
    failing in the middle of a file raises it (`[Errno 5] Input/output error`); other files read as they are."""
    import builtins

    from hf_readonce.tasks import jsonl

    class Failing:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def __iter__(self):
            for number, line in enumerate(self.handle):
                if number == lines_read:
                    raise OSError(errno.EIO, "Input/output error")
                yield line

    def reading(file, *args, **kwargs):
        handle = builtins.open(file, *args, **kwargs)
        return Failing(handle) if Path(file) == path else handle

    monkeypatch.setattr(jsonl, "open", reading, raising=False)


def test_encode_names_the_documents_file_whose_read_fails_midway_and_keeps_what_it_committed(tmp_path, checkpoint,
                                                                                           monkeypatch, capsys):
    """An I/O error while the encoder reads `--documents` (after the checks read its head) is one error line naming
    the option and the path (it was the errno text alone), saying that the documents committed before it are kept;
    they are, and a re-run finishes."""
    rows = [{"id": f"d{i}", "context": f"The cat number {i} sat on the mat in hall {i}."} for i in range(4)]
    docs = write_jsonl(tmp_path / "d.jsonl", rows)
    _failing_reads(monkeypatch, docs, lines_read=2)
    argv = ["encode", str(checkpoint), "--store", str(tmp_path / "s"), "--documents", str(docs), "--no-progress",
            "--batch-size", "1", *WINDOWS[2:]]
    assert cli_main(argv) == 2
    line = _error_line(capsys.readouterr().err, "encode")
    assert line.endswith(f"error: --documents {docs} cannot be read (Input/output error); the documents committed "
                         "before it are kept, re-run to finish."), line
    assert len(RepresentationStore(tmp_path / "s", readonly=True)) == 2
    monkeypatch.undo()
    assert cli_main(argv) == 0
    assert len(RepresentationStore(tmp_path / "s", readonly=True)) == 4


@pytest.mark.parametrize("command, option", [("encode", "--documents"), ("answer", "--questions"),
                                             ("summarize", "--documents")])
def test_an_input_file_whose_first_read_fails_is_named(tmp_path, checkpoint, tokenizer, monkeypatch, command, option,
                                                       capsys):
    """An I/O error on the first read of an input file (the checks before any model work) names the option and the
    path, in the words of a file that cannot be opened, and nothing is created."""
    model = checkpoint
    if command == "summarize":
        from tests.tasks.test_summarization_store import longdoc

        model = tmp_path / "longdoc"
        longdoc(tokenizer).save_pretrained(model)
        tokenizer.save_pretrained(model)
    path = write_jsonl(tmp_path / "in.jsonl", [{**QUESTIONS[0], "document": QUESTIONS[0]["context"]}])
    _failing_reads(monkeypatch, path, lines_read=0)
    argv = [command, str(model), option, str(path), "--store", str(tmp_path / "s"), "--no-progress"]
    if command != "encode":
        argv += ["--output", str(tmp_path / "out.jsonl")]
    assert cli_main(argv) == 2
    line = _error_line(capsys.readouterr().err, command)
    assert line.endswith(f"error: {option} {path} cannot be read (Input/output error); give a file you can read."), \
        line
    assert not (tmp_path / "s").exists() and not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------------------------------ negative numbers
def _argparse_reads_as_a_number(value: str) -> bool:
    """Whether this Python's argparse itself reads `value` after an option as its value (3.14 reads `-1e3`)."""
    import argparse

    plain = argparse.ArgumentParser(exit_on_error=False)
    plain.add_argument("--x", type=float)
    try:
        plain.parse_args(["--x", value])
    except argparse.ArgumentError:
        return False
    return True


@pytest.mark.parametrize("value", ["-1e3", "-2.5E-6", "-1_000", "-inf"])
def test_a_negative_number_argparse_reads_as_an_option_is_told_how_to_write_it(tmp_path, value, capsys):
    """argparse reads `-1e3` after an option as another option (before Python 3.14 it takes only `-1` and `-0.5` as
    numbers): the usage error says so and gives the `--option=VALUE` form, which is then read as the number."""
    import hf_readonce.cli as cli

    argv = ["answer", "no-such-model", "--questions", str(tmp_path / "q.jsonl"), "--store", str(tmp_path / "s"),
            "--output", str(tmp_path / "out.jsonl"), "--no-progress"]
    args = cli.build_parser().parse_args([*argv, f"--null-score-diff-threshold={value}"])
    assert args.null_score_diff_threshold == float(value)
    if _argparse_reads_as_a_number(value):  # nothing to tell: read as the number
        args = cli.build_parser().parse_args([*argv, "--null-score-diff-threshold", value])
        assert args.null_score_diff_threshold == float(value)
        return
    with pytest.raises(SystemExit) as stopped:
        cli_main([*argv, "--null-score-diff-threshold", value])
    assert stopped.value.code == 2
    line = _error_line(capsys.readouterr().err, "answer")
    assert (f"argument --null-score-diff-threshold: expected one argument; {value} is read as an option here: "
            f"write --null-score-diff-threshold={value}") in line, line


def test_the_hint_names_an_abbreviated_option_as_it_was_typed(tmp_path, capsys):
    """argparse takes `--null-score` for `--null-score-diff-threshold`; `--null-score -1e3` is told to write
    `--null-score=-1e3`, which is then read as the number."""
    import hf_readonce.cli as cli

    if _argparse_reads_as_a_number("-1e3"):
        pytest.skip("this Python's argparse reads -1e3 as a number")
    argv = ["answer", "no-such-model", "--questions", str(tmp_path / "q.jsonl"), "--store", str(tmp_path / "s"),
            "--output", str(tmp_path / "out.jsonl"), "--no-progress"]
    with pytest.raises(SystemExit):
        cli_main([*argv, "--null-score", "-1e3"])
    line = _error_line(capsys.readouterr().err, "answer")
    assert "; -1e3 is read as an option here: write --null-score=-1e3" in line, line
    assert cli.build_parser().parse_args([*argv, "--null-score=-1e3"]).null_score_diff_threshold == -1000.0


def test_an_option_without_its_value_gets_no_negative_number_hint(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main(["verify", "--store", str(tmp_path / "s"), "--max-kl"])
    line = _error_line(capsys.readouterr().err, "verify")
    assert "argument --max-kl: expected one argument (`hf-readonce verify --help`" in line and "write" not in line


# ------------------------------------------------------------------------------------------ commands to paste
def _pasted_commands(text: str) -> list[list[str]]:
    """Every `hf-readonce ...` command quoted in backticks in `text`, split as a shell splits it."""
    import re
    import shlex

    return [shlex.split(command) for command in re.findall(r"`(hf-readonce [^`]*)`", text)]


def _store_named(commands: list[list[str]]) -> list[str]:
    return [words[words.index("--store") + 1] for words in commands if "--store" in words]


@pytest.mark.parametrize("case", ["answer-without-a-store", "prune-without-a-space", "store-without-store-json",
                                  "verify-finds-a-damaged-shard"])
def test_a_suggested_command_names_a_store_with_spaces_as_one_word(tmp_path, case, capsys):
    """A store folder whose name holds spaces (and a quote): every command the CLI prints for pasting names it as one
    shell word."""
    store = tmp_path / "my store's reps"
    if case == "answer-without-a-store":
        questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS)
        status = cli_main(["answer", "reference-deformer", "--store", str(store), "--questions", str(questions),
                           "--output", str(tmp_path / "p.jsonl"), "--no-progress"])
    elif case == "prune-without-a-space":
        status = cli_main(["prune", "--store", str(store), "--no-progress"])
    elif case == "store-without-store-json":
        (store / "index").mkdir(parents=True)
        (store / "shards").mkdir()
        status = cli_main(["info", "--store", str(store), "--no-progress"])
    else:
        from hf_readonce.store import content_hash

        RepresentationStore(store).put("f" * 64, {"k": 2, "representation": "test/v1"}, content_hash("a text"),
                                       {"hidden_states": torch.zeros(4, 8)})
        shard = next((store / "shards").rglob("*.safetensors"))
        data = bytearray(shard.read_bytes())
        data[-1] ^= 0xFF  # one flipped byte of the tensor data: the checksum no longer matches
        shard.write_bytes(bytes(data))
        status = cli_main(["verify", "--store", str(store), "--no-progress"])
    captured = capsys.readouterr()
    named = _store_named(_pasted_commands(captured.out + captured.err))
    assert status != 0 and named, captured
    assert set(named) == {str(store)}, named
