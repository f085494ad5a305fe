"""`hf-readonce info MODEL [--store STORE]`: the store key `encode` writes a checkpoint's representations under
(fingerprint per compute dtype, settings), the same key `encode` uses, and which spaces of a store hold it; what
differs in the others (fingerprint, settings, compute dtype); bad input in one line. `info` and `info --store`
without MODEL are tested in tests/test_cli.py."""

import json
import shutil

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from hf_readonce.cli import main as cli_main
from hf_readonce.store import RepresentationStore
from hf_readonce.weights import minilm_path
from tests.conftest import tiny_model, write_jsonl

DOCUMENTS = [{"id": "paris", "context": "Paris is the capital of France, a country in western Europe."},
             {"id": "berlin", "context": "Berlin is the capital of Germany; the Spree runs through it."}]
WINDOWS = ["--max-passage-length", "64", "--doc-stride", "16"]


def _info_json(capsys, *args) -> tuple[int, dict]:
    status = cli_main(["info", *map(str, args), "--json"])
    return status, json.loads(capsys.readouterr().out)


def _encode(model, store, docs, *extra) -> None:
    assert cli_main(["encode", str(model), "--documents", str(docs), "--store", str(store), "--no-progress",
                     "--device", "cpu", *extra]) == 0


def _edited_copy(checkpoint, folder, **fields):
    """A copy of `checkpoint` whose config.json has `fields` changed."""
    shutil.copytree(checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def half_checkpoint(tmp_path_factory, tokenizer):
    """The tiny DeFormer saved in float16, as the shipped checkpoints are: `--compute-dtype auto` computes in
    float32 on a CPU and in float16 on CUDA, two keys."""
    path = tmp_path_factory.mktemp("tiny_deformer_fp16")
    tiny_model().half().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_info_model_reports_the_space_encode_wrote_and_a_changed_config_as_stale(tmp_path, checkpoint, capsys):
    docs, store = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS), tmp_path / "store"
    _encode(checkpoint, store, docs, *WINDOWS)
    (written,) = RepresentationStore(store).spaces()
    capsys.readouterr()

    status, info = _info_json(capsys, checkpoint, "--store", store, *WINDOWS)
    assert status == 0
    (key,) = info["keys"]  # a float32 checkpoint: the same key on a CPU and on CUDA
    assert (key["device"], key["compute_dtype"]) == ("any", "float32")
    assert key["fingerprint"] == written.fingerprint and key["settings"] == written.settings
    assert key["space"] == written.key
    assert info["model_type"] == info["read_as"] == "deformer_bert" and info["store"]["current"] is True
    (row,) = info["store"]["spaces"]
    assert row["match"] == "encode on any device" and row["documents"] == 2 and row["differing_settings"] == {}
    assert row["model_names"] == [str(checkpoint)] and row["same_model_name"] is True  # as encode recorded it
    assert info["options"]["max_passage_length"] == {"option": "--max-passage-length", "value": 64,
                                                     "source": "given"}
    assert cli_main(["info", str(checkpoint), "--store", str(store), *WINDOWS]) == 0
    out = capsys.readouterr().out
    assert f"fingerprint {written.fingerprint}" in out and f"space {written.key[:16]}" in out
    assert (f"- space {written.key[:16]} (deformer_bert, model {checkpoint}, 2 document(s), stored as float16): "
            "matches") in out
    assert out.splitlines()[-1].startswith("current: ")

    # a config field of the fingerprint changed (the weights are the same): no space matches, exit 1
    edited = _edited_copy(checkpoint, tmp_path / "edited", layer_norm_eps=1e-5)
    status, info = _info_json(capsys, edited, "--store", store, *WINDOWS)
    assert status == 1 and info["store"]["current"] is False
    (row,) = info["store"]["spaces"]
    assert row["match"] is None and row["fingerprint_of"] is None and row["differing_settings"] == {}
    assert row["same_model_name"] is False  # another folder
    assert info["keys"][0]["fingerprint"] != written.fingerprint
    assert info["store"]["encode"] == (f"hf-readonce encode {edited} --documents FILE.jsonl --store {store} "
                                       "--max-passage-length 64 --doc-stride 16")
    assert cli_main(["info", str(edited), "--store", str(store), *WINDOWS]) == 1
    out = capsys.readouterr().out
    assert "another fingerprint (other weights, config or compute dtype); the same settings" in out
    assert "not current: " in out and info["store"]["encode"] in out
    # the command it names stores the edited model's space, which info then reports as matching
    _encode(edited, store, docs, *WINDOWS)
    capsys.readouterr()
    status, after = _info_json(capsys, edited, "--store", store, *WINDOWS)
    assert status == 0 and [row["match"] for row in after["store"]["spaces"]].count("encode on any device") == 1
    assert {space.fingerprint for space in RepresentationStore(store).spaces()} == {
        written.fingerprint, info["keys"][0]["fingerprint"]}

    # a config field the fingerprint leaves out (a training setting) keys the same space
    other = _edited_copy(checkpoint, tmp_path / "other", kd_loss_weight=0.25)
    status, info = _info_json(capsys, other, "--store", store, *WINDOWS)
    assert status == 0 and info["keys"][0]["space"] == written.key


def test_info_model_says_when_a_stale_space_was_written_from_the_same_model(tmp_path, checkpoint, capsys):
    """A checkpoint folder changed after `encode` stored its representations: the space `encode` recorded the folder
    for has another fingerprint, and the line says that this model was recorded for it."""
    mine = _edited_copy(checkpoint, tmp_path / "mine")
    docs, store = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS), tmp_path / "store"
    _encode(mine, store, docs, *WINDOWS)
    capsys.readouterr()
    config = json.loads((mine / "config.json").read_text())
    (mine / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-5}))  # changed in place
    status, info = _info_json(capsys, mine, "--store", store, *WINDOWS)
    (row,) = info["store"]["spaces"]
    assert status == 1 and row["fingerprint_of"] is None and row["same_model_name"] is True
    # (a folder beside the store is recorded relative to it, and read where the store is)
    assert row["model_names"] == ["../mine"] == [info["model_name"]] and row["model_locations"] == [str(mine)]
    assert cli_main(["info", str(mine), "--store", str(store), *WINDOWS, "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert ("another fingerprint (other weights, config or compute dtype), though encode recorded this model for it "
            "(its weights or config changed since?); the same settings") in out, out


def test_info_model_defaults_as_encode_does_and_names_settings_that_differ(tmp_path, checkpoint, capsys):
    """Windows the checkpoint records are encode's defaults, and info's; a stored space of the same fingerprint with
    other windows is named with the options that key it."""
    recorded = _edited_copy(checkpoint, tmp_path / "recorded", max_passage_length=48, doc_stride=8)
    docs, store = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS), tmp_path / "store"
    _encode(recorded, store, docs)
    (written,) = RepresentationStore(store).spaces()
    capsys.readouterr()
    status, info = _info_json(capsys, recorded, "--store", store)
    assert status == 0 and info["keys"][0]["space"] == written.key
    assert info["options"]["doc_stride"] == {"option": "--doc-stride", "value": 8, "source": "the checkpoint's"}

    status, info = _info_json(capsys, recorded, "--store", store, "--max-passage-length", "64")
    assert status == 1
    (row,) = info["store"]["spaces"]
    assert row["fingerprint_of"] == "encode on any device" and row["match"] is None
    assert row["differing_settings"] == {"max_passage_length": {"stored": 48, "model": 64}}
    assert cli_main(["info", str(recorded), "--store", str(store), "--max-passage-length", "64"]) == 1
    out = capsys.readouterr().out
    assert ("this model's fingerprint (encode on any device); settings differ: max_passage_length 48 stored, 64 "
            "here (pass --max-passage-length 48 to key it)") in out


def test_encode_settings_take_the_checkpoints_windows_and_leave_args_as_they_are():
    """`encode` and `info MODEL` share `_encode_settings`: a given option, else the checkpoint's recorded value, else
    the family's default, each with where it came from; the parsed arguments are not changed (`info` builds the keys
    of several compute dtypes from the same arguments, and names only the options given)."""
    from hf_readonce.cli import _encode_settings, build_parser

    model = tiny_model()
    model.config.max_passage_length = 48
    args = build_parser().parse_args(["info", "MODEL", "--doc-stride", "8"])
    before = vars(args).copy()
    settings, sources = _encode_settings(args, model)
    assert settings == {"max_passage_length": 48, "doc_stride": 8}
    assert sources == {"max_passage_length": "the checkpoint's", "doc_stride": "given"}
    assert vars(args) == before


def test_info_model_keys_each_compute_dtype_as_encode_does(tmp_path, half_checkpoint, capsys):
    """A float16 checkpoint has a float32 key (encode on a CPU) and a float16 key (on CUDA, where `auto` keeps the
    saved dtype; encode --compute-dtype float16 computes the same on a CPU); a store of one of them matches it, and
    a store of another compute dtype is named with the option that reads it."""
    docs = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS)
    status, info = _info_json(capsys, half_checkpoint, *WINDOWS)
    assert status == 0 and info["checkpoint_dtype"] == "float16"
    assert [(k["device"], k["compute_dtype"]) for k in info["keys"]] == [("cpu", "float32"), ("cuda", "float16")]
    assert info["keys"][0]["fingerprint"] != info["keys"][1]["fingerprint"]
    for extra, device in (([], "cpu"), (["--compute-dtype", "float16"], "cuda")):
        store = tmp_path / f"store_{device}"
        _encode(half_checkpoint, store, docs, *WINDOWS, *extra)
        (written,) = RepresentationStore(store).spaces()
        capsys.readouterr()
        status, found = _info_json(capsys, half_checkpoint, "--store", store, *WINDOWS)
        assert status == 0 and found["keys"] == info["keys"]
        (key,) = [k for k in info["keys"] if k["device"] == device]
        assert key["space"] == written.key and key["fingerprint"] == written.fingerprint
        assert found["store"]["spaces"][0]["match"] == key["label"]
    # asked for bfloat16: the float32 store is this checkpoint's, in another compute dtype
    status, info = _info_json(capsys, half_checkpoint, "--store", tmp_path / "store_cpu", *WINDOWS,
                              "--compute-dtype", "bfloat16")
    assert status == 1 and [k["compute_dtype"] for k in info["keys"]] == ["bfloat16"]
    (row,) = info["store"]["spaces"]
    assert row["other_compute_dtype"] is True and row["compute_dtype"] == "float32"
    assert cli_main(["info", str(half_checkpoint), "--store", str(tmp_path / "store_cpu"), *WINDOWS,
                     "--compute-dtype", "bfloat16"]) == 1
    out = capsys.readouterr().out
    assert "this checkpoint's weights computed in float32; the same settings (pass --compute-dtype float32" in out


@pytest.mark.parametrize("family", ["longdoc_bart", "readonce_bart"])
def test_a_bart_familys_float16_checkpoint_has_a_key_per_compute_dtype(family, tmp_path, tokenizer, capsys):
    """LongDoc and ReadOnce BART, whose fingerprint hashed no dtype at first: a float16 checkpoint encoded with
    --compute-dtype float32 and then float16 into one store writes two spaces (the second run finds nothing already
    stored), and `info MODEL --store` reports each as the key of its compute dtype."""
    from tests.tasks.test_summarization_store import longdoc, readonce

    path, store = tmp_path / "half", tmp_path / "store"
    {"longdoc_bart": longdoc, "readonce_bart": readonce}[family](tokenizer).half().save_pretrained(path)
    tokenizer.save_pretrained(path)
    docs = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS)
    for dtype in ("float32", "float16"):
        _encode(path, store, docs, "--compute-dtype", dtype)
        out = capsys.readouterr().out
        assert "encoded 2 document(s)" in out and "already stored 0" in out, out
    assert len(RepresentationStore(store).spaces()) == 2
    status, info = _info_json(capsys, path, "--store", store)
    assert status == 0 and [key["compute_dtype"] for key in info["keys"]] == ["float32", "float16"]
    assert info["keys"][0]["fingerprint"] != info["keys"][1]["fingerprint"]
    assert info["keys"][0]["settings"] == info["keys"][1]["settings"]  # the fingerprint keys the dtype
    assert sorted(row["match"] for row in info["store"]["spaces"]) == sorted(key["label"] for key in info["keys"])
    assert cli_main(["info", str(path), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "leaves the compute dtype out" not in out
    for key in info["keys"]:
        assert f"matches ({key['label']}, compute dtype {key['compute_dtype']})" in out, out


def test_info_model_of_a_plain_llama_read_as_another_family(tmp_path, checkpoint, capsys):
    """A second family: a plain Llama checkpoint, read as the family whose adapter loads it; its settings carry the
    compute dtype, and the key info prints is the one encode wrote."""
    path = tmp_path / "llama"
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=128)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    docs, store = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS), tmp_path / "store"
    _encode(path, store, docs, "--max-document-length", "32")
    (written,) = RepresentationStore(store).spaces()
    capsys.readouterr()
    status, info = _info_json(capsys, path, "--store", store, "--max-document-length", "32")
    assert status == 0 and info["model_type"] == "llama" and info["read_as"] == written.model_type
    assert info["keys"][0]["space"] == written.key and info["keys"][0]["settings"]["compute_dtype"] == "float32"
    assert info["store"]["spaces"][0]["match"] == "encode on any device"
    status, info = _info_json(capsys, path, "--store", store, "--max-document-length", "16")
    assert status == 1
    assert info["store"]["spaces"][0]["differing_settings"] == {"max_document_length": {"stored": 32, "model": 16}}
    # a store that also holds a DeFormer's passage states: that space is another model type's
    _encode(checkpoint, store, docs, *WINDOWS)
    capsys.readouterr()
    status, info = _info_json(capsys, path, "--store", store, "--max-document-length", "32")
    assert status == 0 and sorted(row["other_model_type"] for row in info["store"]["spaces"]) == [False, True]
    assert cli_main(["info", str(path), "--store", str(store), "--max-document-length", "32"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "(deformer_bert, model " in line]
    assert line.endswith("stored as float16): another model type's representations"), line


def test_info_model_prints_its_report_and_no_loading_notes(tmp_path, capsys):
    """`info MODEL` is a report: the notes loading a checkpoint prints for the commands that answer with it (a plain
    checkpoint read as a family's model, a QA head initialized at random) and transformers' load report (a BERT's
    unused pooler) are not printed, on stdout or stderr; the report says what the checkpoint is read as. A fresh
    process for a plain BERT without QA head (transformers' log handler writes to the stderr it found at import
    time), in-process for a plain Llama read as block-attention Llama, and with --json, whose stdout stays JSON."""
    import os
    import subprocess
    import sys

    from transformers import BertConfig, BertModel

    bert, llama = tmp_path / "bert", tmp_path / "llama"
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(bert)  # a pooler, no head
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=128)).save_pretrained(llama)
    for path in (bert, llama):
        tokenizer.save_pretrained(path)
    done = subprocess.run([sys.executable, "-m", "hf_readonce.cli", "info", str(bert), "--no-progress",
                           *WINDOWS], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"model {bert}: model_type bert, read as deformer_bert "), done.stdout
    assert done.stderr == "", done.stderr  # was: the notes on a plain BERT and its random QA head
    for output in (done.stdout, done.stderr):
        assert "note" not in output and "pooler" not in output and "LOAD REPORT" not in output, output
    capsys.readouterr()
    assert cli_main(["info", str(llama), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"model {llama}: model_type llama, read as block_attention_llama "), out
    assert "note" not in out and err == "", (out, err)
    status, info = _info_json(capsys, llama)  # (json.loads of the whole stdout)
    assert status == 0 and info["read_as"] == "block_attention_llama" and capsys.readouterr().err == ""


def test_info_model_names_the_compute_dtype_a_family_keys_by_its_settings(tmp_path, capsys):
    """A family whose fingerprint leaves the dtype out keys the compute dtype by its settings: a float16 Llama has two
    keys of one fingerprint, and a store written in float16 read with --compute-dtype float32 is named with the
    option that reads it."""
    path = tmp_path / "llama16"
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=128)).half().save_pretrained(path)
    tokenizer.save_pretrained(path)
    docs, store = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS), tmp_path / "store"
    length = ["--max-document-length", "32"]
    _encode(path, store, docs, *length, "--compute-dtype", "float16")
    (written,) = RepresentationStore(store).spaces()
    capsys.readouterr()
    status, info = _info_json(capsys, path, "--store", store, *length)
    assert status == 0 and [key["compute_dtype"] for key in info["keys"]] == ["float32", "float16"]
    assert info["keys"][0]["fingerprint"] == info["keys"][1]["fingerprint"] == written.fingerprint
    assert info["keys"][1]["space"] == written.key and info["store"]["spaces"][0]["match"] == info["keys"][1]["label"]
    assert cli_main(["info", str(path), "--store", str(store), *length, "--compute-dtype", "float32"]) == 1
    out = capsys.readouterr().out
    assert ('settings differ: compute_dtype "float16" stored, "float32" here (pass --compute-dtype float16 to key '
            "it)") in out, out


def test_info_model_names_a_damaged_index_as_info_store_does(tmp_path, checkpoint, capsys):
    """A store whose index file of the model's space is unreadable shows no space: `info MODEL --store` says so (the
    unreadable index files, the orphan shards they listed, and the commands that name and repair them), as `info
    --store` does, instead of only that the store is not current; exit 1, the store untouched."""
    docs, store = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS), tmp_path / "store"
    _encode(checkpoint, store, docs, *WINDOWS)
    (manifest,) = (store / "index").glob("*.json")
    manifest.write_text("{not json")
    capsys.readouterr()
    status, info = _info_json(capsys, checkpoint, "--store", store, *WINDOWS)
    assert status == 1 and info["store"]["spaces"] == [] and info["store"]["current"] is False
    assert info["store"]["bad_manifests"] == [manifest.name] and len(info["store"]["orphans"]) == 1
    assert cli_main(["info", str(checkpoint), "--store", str(store), *WINDOWS]) == 1
    out = capsys.readouterr().out
    assert f"unreadable index files: {manifest.name}" in out and "orphan shard files" in out, out
    assert f"hf-readonce verify --store {store}" in out and f"{info['store']['encode']} --repair" in out, out
    assert manifest.read_text() == "{not json"


def test_info_model_bad_input_is_one_line(tmp_path, checkpoint, capsys):
    """Not a checkpoint, an unregistered model_type, a model type no adapter stores, a missing store, an option of
    another family or one given without MODEL: one line, exit 2, nothing created."""
    (tmp_path / "empty").mkdir()
    for name, model_type in (("unknown", "no_such_family"), ("gpt2", "gpt2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"model_type": model_type}))
    docs = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS)
    cases = [
        ([tmp_path / "empty"], "holds no config.json, so it is no saved checkpoint"),
        ([tmp_path / "absent"], "does not exist"),
        ([docs], "is a file, not a checkpoint folder"),
        ([tmp_path / "unknown"], "its model_type 'no_such_family' is neither a transformers architecture nor an "
                                 "hf-readonce family"),
        ([tmp_path / "gpt2"], "has model_type 'gpt2'; this command supports"),
        ([checkpoint, "--store", tmp_path / "no_store"], f"no store at {tmp_path / 'no_store'}"),
        ([checkpoint, "--max-document-length", "32"], "--max-document-length does not apply to deformer_bert models"),
        (["--max-passage-length", "64"], "--max-passage-length is read only with MODEL"),
        (["--compute-dtype", "float16"], "--compute-dtype is read only with MODEL"),
        (["--compression-ratio", "4", "--store", tmp_path / "no_store"], "--compression-ratio is read only with MODEL"),
    ]
    for args, expected in cases:
        assert cli_main(["info", *map(str, args)]) == 2, args
        captured = capsys.readouterr()
        assert captured.err.startswith("hf-readonce info: error: ") and expected in captured.err, (args, captured.err)
        assert captured.err.count("\n") == 1 and "Traceback" not in captured.err and not captured.out, captured
    assert not (tmp_path / "no_store").exists()
    # the options every command takes are no MODEL option
    assert cli_main(["info", "--no-progress", "--json"]) == 0 and json.loads(capsys.readouterr().out)


def test_info_help_lists_model_and_its_options(capsys):
    with pytest.raises(SystemExit):
        cli_main(["info", "--help"])
    out = capsys.readouterr().out
    for word in ("model", "--store", "--compute-dtype", "--max-passage-length", "--max-document-length",
                 "--compression-ratio", "fingerprint"):
        assert word in out, word
