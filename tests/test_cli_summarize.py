"""`hf-readonce summarize`: summaries of real XSum documents generated from their stored representations equal the
model reading the documents itself, ROUGE is printed beside lead-1 and lead-3, and what cannot be served is refused
in one line (exit 2) without touching the store."""

import json

import pytest

from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationStore
from tests.conftest import DATA_DIR, write_jsonl
from tests.tasks.test_summarization_store import longdoc, read_alone, readonce


@pytest.fixture(scope="module")
def xsum_rows():
    path = DATA_DIR / "xsum" / "validation.jsonl"
    if not path.is_file():
        pytest.skip(f"real data not found under {DATA_DIR}")
    return [json.loads(line) for line in path.open(encoding="utf-8")][:6]


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer):
    """Saved tiny LongDoc and ReadOnce checkpoints with the MiniLM tokenizer."""
    out = {}
    for name, build in (("longdoc", longdoc), ("readonce", readonce)):
        path = tmp_path_factory.mktemp(name)
        build(tokenizer).save_pretrained(path)
        tokenizer.save_pretrained(path)
        out[name] = path
    return out


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_summarize_from_the_store_with_rouge_beside_lead_3(tmp_path, folders, tokenizer, xsum_rows, capsys):
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows + [xsum_rows[0] | {"id": "again"}])
    store, output = tmp_path / "store", tmp_path / "summaries.jsonl"
    assert cli_main(["encode", str(folders["longdoc"]), "--documents", str(docs), "--store", str(store),
                     "--text-field", "document", "--max-document-length", "64", "--dtype", "fp32",
                     "--no-progress"]) == 0
    # XSum articles are longer than 64 tokens: each one stored is cut, and the count is said
    assert f"note: {len(xsum_rows)} document(s) held more than the 64 tokens" in capsys.readouterr().err
    assert cli_main(["summarize", str(folders["longdoc"]), "--store", str(store), "--documents", str(docs),
                     "--output", str(output), "--max-new-tokens", "5", "--num-beams", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    lines = _lines(output)
    assert [line["id"] for line in lines] == [r["id"] for r in xsum_rows] + ["again"]
    model = longdoc(tokenizer)
    alone = read_alone(model, tokenizer, [r["document"] for r in xsum_rows], 64, max_new_tokens=5, num_beams=2,
                       do_sample=False)
    assert [line["summary_text"] for line in lines] == alone + alone[:1]
    assert "summarized 7 document(s) (6 distinct)" in out and "max_document_length 64" in out
    model_line = next(line for line in out.splitlines() if line.startswith("model "))
    assert "ROUGE-1" in model_line and "ROUGE-L" in model_line
    assert "baseline: lead-1" in out and "baseline: lead-3" in out


def test_readonce_reads_the_k_asked_for_and_another_prompt(tmp_path, folders, xsum_rows, capsys):
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:3])
    store, output = tmp_path / "store", tmp_path / "summaries.jsonl"
    common = ["--store", str(store), "--documents", str(docs), "--no-progress"]
    for k in ("4", "8"):
        assert cli_main(["encode", str(folders["readonce"]), *common, "--text-field", "document",
                         "--max-document-length", "64", "--compression-ratio", k]) == 0
    capsys.readouterr()
    summarize = ["summarize", str(folders["readonce"]), *common, "--output", str(output), "--max-new-tokens", "3"]
    assert cli_main(summarize) == 2  # two k stored: which one is asked for
    assert "compression_ratio=4" in capsys.readouterr().err
    assert cli_main(summarize + ["--compression-ratio", "8", "--prompt", "title"]) == 0
    out = capsys.readouterr().out
    assert "compression_ratio 8" in out and "prompt 'title'" in out and len(_lines(output)) == 3


@pytest.mark.parametrize("extra, message", [
    (["--prompt", "title"], "--prompt does not apply to longdoc_bart"),
    (["--compression-ratio", "2"], "--compression-ratio does not apply to longdoc_bart"),
    (["--max-document-length", "32"], "holds no longdoc_bart representations"),
    (["--max-new-tokens", "97"], "--max-new-tokens 97 does not fit the model's 96 decoder positions"),
    (["--id-field", "nope"], "--id-field 'nope': no line of"),
])
def test_what_cannot_be_served_is_refused_in_one_line(tmp_path, folders, xsum_rows, capsys, extra, message):
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:2])
    store = tmp_path / "store"
    assert cli_main(["encode", str(folders["longdoc"]), "--documents", str(docs), "--store", str(store),
                     "--text-field", "document", "--max-document-length", "64", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["summarize", str(folders["longdoc"]), "--store", str(store), "--documents", str(docs),
                     "--output", str(tmp_path / "o.jsonl"), "--no-progress", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "o.jsonl").exists()
    assert len(RepresentationStore(store)) == 2


def test_missing_documents_no_store_and_other_families(tmp_path, folders, checkpoint, xsum_rows, capsys):
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:3])
    base = ["summarize", str(folders["longdoc"]), "--documents", str(docs), "--no-progress", "--max-new-tokens", "2"]
    output = tmp_path / "o.jsonl"
    assert cli_main(base + ["--store", str(tmp_path / "nowhere"), "--output", str(output)]) == 2
    assert "no store at" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()
    store = tmp_path / "store"
    assert cli_main(["encode", str(folders["longdoc"]), "--documents", str(write_jsonl(tmp_path / "one.jsonl",
                     xsum_rows[:1])), "--store", str(store), "--text-field", "document", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(base + ["--store", str(store), "--output", str(output)]) == 2
    assert "2 of 3 documents are not stored" in capsys.readouterr().err
    assert cli_main(base + ["--store", str(store), "--output", str(output), "--encode-missing"]) == 0
    assert len(RepresentationStore(store)) == 3 and len(_lines(output)) == 3
    assert "(3 distinct) from stored representations (--encode-missing encoded 2 of these documents first)" in \
        capsys.readouterr().out
    # a DeFormer store holds passage states: no summaries, the families that summarize are named
    assert cli_main(["summarize", str(checkpoint), "--store", str(store), "--documents", str(docs), "--output",
                     str(output), "--no-progress"]) == 2
    assert "longdoc_bart, readonce_bart" in capsys.readouterr().err
    # a failed --encode-missing into a new store leaves no store behind
    assert cli_main(base + ["--store", str(tmp_path / "new"), "--output", str(output), "--encode-missing",
                            "--prompt", "x"]) == 2
    assert not (tmp_path / "new").exists()


def test_the_first_missing_document_is_named_by_its_id_and_line(tmp_path, folders, xsum_rows, capsys):
    """`summarize` named the first document not stored as "document 1", its index in a list the user never saw, where
    `answer` names the question's id: it is named by its `--id-field` and line number (by its line alone without
    an id)."""
    store = tmp_path / "store"
    assert cli_main(["encode", str(folders["longdoc"]), "--documents", str(write_jsonl(tmp_path / "one.jsonl",
                     xsum_rows[:1])), "--store", str(store), "--text-field", "document", "--no-progress"]) == 0
    capsys.readouterr()
    base = ["summarize", str(folders["longdoc"]), "--store", str(store), "--output", str(tmp_path / "o.jsonl"),
            "--no-progress", "--max-new-tokens", "2"]
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:3])
    assert cli_main(base + ["--documents", str(docs)]) == 2
    err = capsys.readouterr().err
    assert "2 of 3 documents are not stored" in err and f"(first: the document of id {xsum_rows[1]['id']!r} " \
        "(line 2))" in err, err
    nameless = write_jsonl(tmp_path / "nameless.jsonl", [{"document": r["document"]} for r in xsum_rows[:3]])
    assert cli_main(base + ["--documents", str(nameless)]) == 2
    assert "(first: the document on line 2)" in capsys.readouterr().err


def test_documents_file_problems(tmp_path, folders, xsum_rows, capsys):
    base = ["summarize", str(folders["longdoc"]), "--store", str(tmp_path / "s"), "--output",
            str(tmp_path / "o.jsonl"), "--no-progress"]
    wrong = write_jsonl(tmp_path / "wrong.jsonl", [{"id": "a", "context": "text"}])
    assert cli_main(base + ["--documents", str(wrong)]) == 1
    assert "--text-field 'document': no line" in capsys.readouterr().err
    twice = write_jsonl(tmp_path / "twice.jsonl", xsum_rows[:2] + [xsum_rows[0]])
    assert cli_main(base + ["--documents", str(twice)]) == 2
    assert "duplicate document id" in capsys.readouterr().err
    assert cli_main(base + ["--documents", str(tmp_path)]) == 2
    assert f"--documents {tmp_path} is a directory, expected a JSONL file." in capsys.readouterr().err


def test_encode_missing_beside_another_models_representations(tmp_path, folders, tokenizer, xsum_rows, capsys):
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:2])
    other = tmp_path / "other"
    longdoc(tokenizer, seed=1).save_pretrained(other)
    tokenizer.save_pretrained(other)
    store = tmp_path / "store"
    assert cli_main(["encode", str(other), "--documents", str(docs), "--store", str(store), "--text-field",
                     "document", "--no-progress"]) == 0
    base = ["summarize", str(folders["longdoc"]), "--store", str(store), "--documents", str(docs), "--output",
            str(tmp_path / "o.jsonl"), "--no-progress", "--max-new-tokens", "2"]
    assert cli_main(base) == 2
    assert "only for model fingerprint" in capsys.readouterr().err
    assert cli_main(base + ["--encode-missing"]) == 0
    assert len(RepresentationStore(store).spaces()) == 2


def test_a_prompt_longer_than_read_is_refused_and_an_absent_summary_field_noted(tmp_path, folders, xsum_rows, capsys):
    """ReadOnce reads at most 32 prompt tokens with each document: a longer `--prompt` is refused by name (it was cut
    in silence while the settings line showed it whole); a `--summary-field` no document has says why no ROUGE."""
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:2])
    store = tmp_path / "store"
    assert cli_main(["encode", str(folders["readonce"]), "--documents", str(docs), "--store", str(store),
                     "--no-progress"]) == 0
    capsys.readouterr()
    summarize = ["summarize", str(folders["readonce"]), "--store", str(store), "--documents", str(docs),
                 "--max-new-tokens", "3", "--no-progress"]
    assert cli_main([*summarize, "--output", str(tmp_path / "a.jsonl"), "--prompt", "word " * 40]) == 2
    err = capsys.readouterr().err
    assert "--prompt holds 42 tokens; this readonce_bart model reads at most 32" in err and "Traceback" not in err
    assert not (tmp_path / "a.jsonl").exists()
    assert cli_main([*summarize, "--output", str(tmp_path / "b.jsonl"), "--summary-field", "nope"]) == 0
    captured = capsys.readouterr()
    assert "no document has --summary-field 'nope'" in captured.err and "ROUGE" not in captured.out
    blank = write_jsonl(tmp_path / "blank.jsonl", [{**row, "summary": " "} for row in xsum_rows[:2]])
    assert cli_main([*summarize[:4], "--documents", str(blank), *summarize[6:], "--output", str(tmp_path / "d.jsonl"),
                     "--summary-field", "summary"]) == 0
    assert "2 of 2 document(s) carry no reference summary" in capsys.readouterr().err  # the field is there, blank
    assert cli_main([*summarize, "--output", str(tmp_path / "c.jsonl")]) == 0  # the default field: ROUGE, no note
    captured = capsys.readouterr()
    assert "ROUGE" in captured.out and "note" not in captured.err


def test_documents_cut_to_the_length_read_are_counted(tmp_path, folders, tokenizer, xsum_rows, capsys):
    """A document longer than the representations read is summarized from its first tokens only: `summarize` says
    how many (with --encode-missing, whose encoding said nothing of it, and from a store `encode` filled); a store of
    short documents gives no note."""
    long_rows = xsum_rows[:2]
    assert all(len(tokenizer(r["document"]).input_ids) > 64 for r in long_rows)
    short = {"id": "short", "document": "Rain is expected.", "summary": "Rain."}
    docs = write_jsonl(tmp_path / "xsum.jsonl", long_rows + [short])
    store, output = tmp_path / "store", tmp_path / "o.jsonl"
    summarize = ["summarize", str(folders["longdoc"]), "--store", str(store), "--documents", str(docs), "--output",
                 str(output), "--max-new-tokens", "2", "--max-document-length", "64", "--no-progress"]
    assert cli_main([*summarize, "--encode-missing"]) == 0
    captured = capsys.readouterr()
    assert "--encode-missing encoded 3" in captured.out and "Traceback" not in captured.err
    assert "note: 2 of the 3 distinct document(s) held more than the 64 tokens read per document" in captured.err
    assert cli_main(summarize) == 0  # from the store: the same documents, the same note
    assert "note: 2 of the 3 distinct document(s) held more than the 64 tokens" in capsys.readouterr().err
    only_short = write_jsonl(tmp_path / "short.jsonl", [short])
    assert cli_main([*summarize[:4], "--documents", str(only_short), *summarize[6:]]) == 0
    assert "held more than" not in capsys.readouterr().err


@pytest.mark.parametrize("family, extra, message", [
    ("longdoc", ["--max-document-length", "500"], "--max-document-length 500 exceeds the model's"),
    ("longdoc", ["--max-document-length", "0"], "--max-document-length must be >= 1, got 0"),
    ("readonce", ["--compression-ratio", "0"], "--compression-ratio must be >= 1, got 0"),
])
def test_a_family_setting_out_of_range_is_named_as_its_option(tmp_path, folders, xsum_rows, capsys, family, extra,
                                                               message):
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:1])
    store = tmp_path / "store"
    assert cli_main(["summarize", str(folders[family]), "--store", str(store), "--documents", str(docs), "--output",
                     str(tmp_path / "o.jsonl"), "--no-progress", "--encode-missing", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "`" not in err.split(message)[0]
    assert not store.exists() and not (tmp_path / "o.jsonl").exists()


def test_a_failed_run_leaves_no_output_folder_behind(tmp_path, folders, xsum_rows, capsys):
    """`--output` in folders that do not exist yet: they are made before any work (a path that cannot be written
    fails first), and a run that then fails removes them again; a folder that held something before stays."""
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:1])
    output = tmp_path / "new" / "deeper" / "o.jsonl"
    assert cli_main(["summarize", str(folders["longdoc"]), "--store", str(tmp_path / "nowhere"), "--documents",
                     str(docs), "--output", str(output), "--no-progress"]) == 2
    assert "no store at" in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and not (tmp_path / "nowhere").exists()
    (tmp_path / "kept").mkdir()
    assert cli_main(["summarize", str(folders["longdoc"]), "--store", str(tmp_path / "nowhere"), "--documents",
                     str(docs), "--output", str(tmp_path / "kept" / "sub" / "o.jsonl"), "--no-progress"]) == 2
    assert (tmp_path / "kept").is_dir() and not (tmp_path / "kept" / "sub").exists()
    assert cli_main(["summarize", str(folders["longdoc"]), "--store", str(tmp_path / "s"), "--documents", str(docs),
                     "--output", str(output), "--no-progress", "--encode-missing", "--max-new-tokens", "2"]) == 0
    assert output.is_file()


def test_a_failed_run_removes_the_output_folder_it_made_under_a_literal_tilde(tmp_path, monkeypatch, capsys):
    """`--output '~/new/o.jsonl'` (not expanded by a shell) is written under `./~/new`, which `_output_file` makes: a
    run that then fails removes that folder, not one under the home folder."""
    (tmp_path / "cwd").mkdir()
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "a", "document": "Rain is expected."}])
    assert cli_main(["summarize", "reference-deformer", "--store", str(tmp_path / "nowhere"), "--documents",
                     str(docs), "--output", "~/new/o.jsonl", "--no-progress"]) == 2
    assert "does not generate summaries" in capsys.readouterr().err
    assert not any((tmp_path / "cwd").iterdir()) and not any((tmp_path / "home").iterdir())


def test_summarize_offers_the_settings_of_the_summarizing_families_only(tmp_path, folders, xsum_rows, capsys):
    """`summarize --help` listed DeFormer's `--max-passage-length` ("deformer_bert: window length ... (default 256)")
    and `--doc-stride` and ReadTwice's `--mentions`, families that do not summarize (`hf-readonce info` lists those
    options for encode, answer and publish only); each command now takes the settings of the families it serves."""
    import argparse

    from hf_readonce.cli import build_parser
    from hf_readonce.representations import registered_families

    parser = build_parser(family_options=True)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    specs = registered_families().values()
    serves = {"encode": lambda spec: True, "publish": lambda spec: True,
              "answer": lambda spec: spec.answer is not None, "summarize": lambda spec: spec.summarize}
    for command, takes in serves.items():
        options = {option for action in commands[command]._actions for option in action.option_strings}
        for spec in specs:
            for option, _, _ in (spec.adapter.cli_settings.values() if spec.adapter is not None else ()):
                if takes(spec):
                    assert option in options, (command, spec.name, option)
    summarize = {option for action in commands["summarize"]._actions for option in action.option_strings}
    assert {"--max-passage-length", "--doc-stride", "--mentions"}.isdisjoint(summarize), summarize
    assert "--compression-ratio" in summarize and "--mentions" in \
        {option for action in commands["answer"]._actions for option in action.option_strings}
    # given anyway, the option is refused in one line, naming the command's help
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:1])
    with pytest.raises(SystemExit) as stop:
        cli_main(["summarize", str(folders["longdoc"]), "--store", str(tmp_path / "store"), "--documents", str(docs),
                  "--output", str(tmp_path / "o.jsonl"), "--no-progress", "--doc-stride", "8"])
    assert stop.value.code == 2 and not (tmp_path / "store").exists()
    err = capsys.readouterr().err
    assert "unrecognized arguments: --doc-stride 8" in err and "Traceback" not in err, err


def test_of_several_stored_lengths_the_default_is_read_and_none_is_an_error(tmp_path, folders, xsum_rows, capsys):
    """`--max-document-length`'s help says what `summarize` (and `answer`) read without it: the store's only length,
    of several the one `encode` writes by default, and where none of them is, an error naming them (the help left the
    last case out)."""
    import argparse

    from hf_readonce.cli import build_parser

    docs, store = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:2]), tmp_path / "store"
    encode = ["encode", str(folders["longdoc"]), "--documents", str(docs), "--store", str(store), "--text-field",
              "document", "--no-progress"]
    summarize = ["summarize", str(folders["longdoc"]), "--store", str(store), "--documents", str(docs), "--output",
                 str(tmp_path / "o.jsonl"), "--no-progress", "--max-new-tokens", "2"]
    for length in ("32", "64"):  # the tiny model's default is its 96 positions
        assert cli_main(encode + ["--max-document-length", length]) == 0
    capsys.readouterr()
    assert cli_main(summarize) == 2
    assert "several settings (max_document_length=32; max_document_length=64)" in capsys.readouterr().err
    assert cli_main(encode) == 0
    capsys.readouterr()
    assert cli_main(summarize) == 0
    assert "representations of max_document_length 96" in capsys.readouterr().out
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command in ("answer", "summarize"):
        option = next(a for a in commands[command]._actions if "--max-document-length" in a.option_strings)
        assert "of several, the one `encode` writes by default, and where none is, an error names them" in \
            option.help, (command, option.help)


def test_empty_summaries_are_counted_in_a_note(tmp_path, folders, xsum_rows, capsys, monkeypatch):
    """An undertrained model may generate nothing but special tokens: `summarize` wrote those empty summaries without
    a word; one note on stderr now counts them, in the words of its other notes."""
    import functools

    import hf_readonce.tasks.summarization_store as summarization_store

    generate = summarization_store.summarize_from_store

    @functools.wraps(generate)  # (the CLI reads its signature)
    def two_empty(*args, **kwargs):  # the first two documents' summaries as such a model gives them
        summaries = generate(*args, **kwargs)
        return ["", " \n"] + summaries[2:]

    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:3])
    output = tmp_path / "o.jsonl"
    summarize = ["summarize", str(folders["longdoc"]), "--store", str(tmp_path / "store"), "--documents", str(docs),
                 "--output", str(output), "--max-new-tokens", "3", "--max-document-length", "64", "--encode-missing",
                 "--no-progress"]
    assert cli_main(summarize) == 0
    assert "summaries are empty" not in capsys.readouterr().err
    monkeypatch.setattr(summarization_store, "summarize_from_store", two_empty)
    assert cli_main(summarize) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "are empty" in line]
    assert notes == ["hf-readonce summarize: note: 2 of the 3 summaries are empty: the model generated no text for "
                     "their documents (only special tokens or whitespace, as an undertrained checkpoint does), and "
                     'they are written as ""'], err
    assert [line["summary_text"] for line in _lines(output)][:2] == ["", " \n"]


def test_summarize_encode_missing_names_the_model_as_encode_does(tmp_path, folders, xsum_rows, monkeypatch):
    """`summarize --encode-missing MODEL` records MODEL with the space it writes as `encode` does (a local folder as
    its absolute path), not the relative path the model was loaded from."""
    docs = write_jsonl(tmp_path / "xsum.jsonl", xsum_rows[:2])
    store = tmp_path / "store"
    monkeypatch.chdir(folders["longdoc"].parent)
    assert cli_main(["summarize", folders["longdoc"].name, "--store", str(store), "--documents", str(docs),
                     "--output", str(tmp_path / "o.jsonl"), "--max-new-tokens", "2", "--max-document-length", "64",
                     "--encode-missing", "--no-progress"]) == 0
    spaces = RepresentationStore(store).info()["spaces"]
    assert [space["model_names"] for space in spaces.values()] == [[str(folders["longdoc"])]], spaces
