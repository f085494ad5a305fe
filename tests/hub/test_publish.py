"""`hf_readonce.hub.publish` and `hf-readonce publish`: the folder a Hub repo needs (weights, code, pipeline,
tokenizer, representation format, card), loading it with `pipeline(..., trust_remote_code=True)` where hf_readonce
cannot be imported, the upload path with a mocked `HfApi` (no network), the store export, and the representation
format check of a store."""

import json
from pathlib import Path

import pytest
import torch

from hf_readonce.cli import main as cli_main
from hf_readonce.hub.publish import publish
from hf_readonce.store import RepresentationMismatchError, RepresentationStore, import_from_dataset
from hf_readonce.store.format_check import check_store_format, load_representation_format
from tests.conftest import run_without_hf_readonce, tiny_model
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS, package_answers

SETTINGS = {"max_question_length": 16, "max_passage_length": 24, "doc_stride": 8}


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory, tokenizer):
    """A tiny DeFormer saved with its tokenizer and the window settings a training run records."""
    path = tmp_path_factory.mktemp("tiny_deformer_trained")
    model = tiny_model()
    for name, value in SETTINGS.items():
        setattr(model.config, name, value)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory, checkpoint_dir, tokenizer):
    from hf_readonce.representations import DeformerBertAdapter, fill_store

    path = tmp_path_factory.mktemp("reps") / "store"
    model = DeformerBertAdapter.load_model(str(checkpoint_dir)).eval()
    adapter = DeformerBertAdapter(model, tokenizer, max_passage_length=24, doc_stride=8)
    fill_store(adapter, RepresentationStore(path), CONTEXTS, store_dtype="float16")
    return path


@pytest.fixture(scope="module")
def published(tmp_path_factory, checkpoint_dir, store_dir):
    out = tmp_path_factory.mktemp("published") / "tiny-deformer"
    result = publish(checkpoint_dir, "someone/tiny-deformer", local_dir=out, store=store_dir,
                     card={"base_model": "sentence-transformers/all-MiniLM-L6-v2", "datasets": ["quoref"]})
    return result


def test_published_folder_is_a_hub_repo(published, checkpoint_dir):
    from huggingface_hub import ModelCard

    folder = published.folder
    assert published.files == sorted([
        "README.md", "config.json", "configuration_deformer_bert.py", "model.safetensors", "modeling_deformer_bert.py",
        "pipeline_deformer_bert.py", "representation_format.json", "tokenizer.json", "tokenizer_config.json"])
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForQuestionAnswering"] == "modeling_deformer_bert.DeformerBertForQuestionAnswering"
    assert config["auto_map"]["AutoModel"] == "modeling_deformer_bert.DeformerBertModel"  # every head of the family
    assert config["custom_pipelines"] == {"question-answering": {
        "impl": "pipeline_deformer_bert.DeformerQuestionAnsweringPipeline", "pt": ["AutoModelForQuestionAnswering"],
        "type": "text"}}
    assert config["max_passage_length"] == 24  # the recorded settings travel
    # what describes this machine does not travel: the offline flag of the tokenizer load, the 0o600 of a temp file
    assert "local_files_only" not in json.loads((folder / "tokenizer_config.json").read_text())
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert {(folder / name).stat().st_mode & 0o777 for name in published.files} == {0o666 & ~umask}
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "question-answering"
    assert card.data.tags == ["hf-readonce", "deformer", "custom_code"]
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2" and card.data.datasets == ["quoref"]
    assert card.data.widget[0]["context"] and "trust_remote_code=True" in card.text
    assert "https://huggingface.co/datasets/someone/tiny-deformer-representations" in card.text
    fmt = load_representation_format(folder)
    model = tiny_model()
    assert fmt["fingerprint"] == model.representation_fingerprint()
    assert fmt["settings"]["num_decomposed_layers"] == 2 and fmt["settings"]["max_passage_length"] == 24
    assert (fmt["dtype"], fmt["store_format_version"], fmt["model_type"]) == ("float16", 1, "deformer_bert")


def test_pipeline_from_published_folder_without_hf_readonce(published, tokenizer, tmp_path):
    """A fresh process where `import hf_readonce` fails: `pipeline("question-answering", model=DIR,
    trust_remote_code=True)` loads the model and the pipeline from the folder's own code and gives the answers of
    the package's QA path."""
    model = tiny_model()
    expected = {}
    for context, questions in zip(CONTEXTS, QUESTIONS):
        for question, answer in zip(questions, package_answers(model, tokenizer, questions, context, 15, False)[0]):
            expected[question] = answer
    (tmp_path / "cases.json").write_text(json.dumps({"contexts": CONTEXTS, "questions": QUESTIONS}))
    result = run_without_hf_readonce(f"""
        import json
        try:
            import hf_readonce
            raise SystemExit("hf_readonce was importable")
        except ImportError:
            pass
        from transformers import pipeline
        qa = pipeline("question-answering", model={str(published.folder)!r}, trust_remote_code=True)
        assert "hf_readonce" not in type(qa).__module__ and "hf_readonce" not in type(qa.model).__module__
        cases = json.load(open({str(tmp_path / 'cases.json')!r}))
        answers = {{}}
        for context, questions in zip(cases["contexts"], cases["questions"]):
            for question, answer in zip(questions, qa(question=questions, context=context)):
                answers[question] = answer["answer"]
        print("ANSWERS", json.dumps(answers))
        import torch
        from transformers import AutoModel  # the bare model of a checkpoint published from its QA head
        bare = AutoModel.from_pretrained({str(published.folder)!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            states = bare(input_ids=torch.tensor([[101, 2040, 2626, 102, 3, 4, 5, 102]]),
                          token_type_ids=torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])).last_hidden_state
        print("BARE", type(bare).__module__, type(bare).__name__, json.dumps(states.flatten().tolist()))
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("ANSWERS "))
    assert json.loads(line[len("ANSWERS "):]) == expected
    _, module, name, values = next(line for line in result.stdout.splitlines() if line.startswith("BARE ")).split(" ", 3)
    assert module.startswith("transformers_modules.") and name == "DeformerBertModel"
    with torch.no_grad():
        states = model.bert(input_ids=torch.tensor([[101, 2040, 2626, 102, 3, 4, 5, 102]]),
                            token_type_ids=torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])).last_hidden_state
    assert torch.equal(torch.tensor(json.loads(values)), states.flatten())


def test_store_exported_beside_the_folder_and_checked(published, store_dir, tmp_path):
    from datasets import Dataset

    parquet = published.representations_dir / "data" / "train-00000-of-00001.parquet"
    assert parquet.is_file() and "someone/tiny-deformer" in (published.representations_dir / "README.md").read_text()
    copy = RepresentationStore(tmp_path / "copy")
    assert import_from_dataset(copy, Dataset.from_parquet(str(parquet))) == len(CONTEXTS)
    fmt = published.representation_format
    assert check_store_format(copy, fmt).fingerprint == fmt["fingerprint"]
    # mismatches name what differs
    with pytest.raises(RepresentationMismatchError, match="doc_stride 8 != 4"):
        check_store_format(copy, {**fmt, "settings": {**fmt["settings"], "doc_stride": 4}})
    with pytest.raises(RepresentationMismatchError, match="fingerprint .* is none of the declared ones"):
        check_store_format(copy, {**fmt, "fingerprint": "0" * 64, "fingerprints": {"float32": "1" * 64}})
    with pytest.raises(TypeError, match="fingerprints"):
        check_store_format(copy, {**fmt, "fingerprints": ["0" * 64]})
    with pytest.raises(RepresentationMismatchError, match="stores 'hidden_states' as float16; the checkpoint "
                                                          "declares float32"):
        check_store_format(copy, {**fmt, "dtype": "float32"})
    assert check_store_format(copy, {**fmt, "dtype": "float32"}, check_dtype=False)
    with pytest.raises(RepresentationMismatchError, match="store format"):
        check_store_format(copy, {**fmt, "store_format_version": 2})
    with pytest.raises(ValueError, match="lacks the key"):
        check_store_format(copy, {k: v for k, v in fmt.items() if k != "fingerprint"})
    empty = RepresentationStore(tmp_path / "empty")
    with pytest.raises(RepresentationMismatchError, match="no representation at all"):
        check_store_format(empty, fmt)


def test_publish_refuses_a_store_of_other_settings(checkpoint_dir, tmp_path, tokenizer):
    from hf_readonce.representations import DeformerBertAdapter, fill_store

    model = DeformerBertAdapter.load_model(str(checkpoint_dir)).eval()
    other = RepresentationStore(tmp_path / "other")
    fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=20, doc_stride=4), other, CONTEXTS[1:])
    with pytest.raises(ValueError, match="max_passage_length 20 != 24"):
        publish(checkpoint_dir, "someone/x", local_dir=tmp_path / "out", store=other.path)


class FakeApi:
    """Records the Hub calls; checks that the folder is complete when it is uploaded."""

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        files = sorted(str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file())
        self.calls.append(("upload_folder", repo_id, {**kwargs, "files": files, "folder": folder_path}))
        return type("Commit", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()


def test_upload_creates_the_repo_and_uploads_one_commit(checkpoint_dir, store_dir, monkeypatch):
    from datasets import Dataset

    pushed = []
    monkeypatch.setattr(Dataset, "push_to_hub", lambda self, repo_id, **kw: pushed.append((repo_id, len(self), kw)))
    api = FakeApi()
    result = publish(checkpoint_dir, "someone/tiny-deformer", private=True, store=store_dir, api=api)
    assert [call[0] for call in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[0][1] == "someone/tiny-deformer" and api.calls[0][2]["private"] is True
    upload = api.calls[1][2]
    assert "README.md" in upload["files"] and "pipeline_deformer_bert.py" in upload["files"]
    assert upload["files"] == result.files
    assert not Path(upload["folder"]).exists()  # the temporary folder is gone after the upload
    assert pushed == [("someone/tiny-deformer-representations", len(CONTEXTS),
                       {"private": True, "token": None, "commit_message": "Representations of someone/tiny-deformer"})]
    assert result.commit_url.endswith("/commit/abc")


def test_other_families_publish(tmp_path, tokenizer):
    from huggingface_hub import ModelCard

    from hf_readonce import (
        ReadOnceBartConfig,
        ReadOnceBartForConditionalGeneration,
        RecurrentGPT2Config,
        RecurrentGPT2LMHeadModel,
    )

    torch.manual_seed(0)
    bart = ReadOnceBartForConditionalGeneration(ReadOnceBartConfig(
        vocab_size=30522, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        compression_ratio=4, pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=101))
    bart.save_pretrained(tmp_path / "bart")
    tokenizer.save_pretrained(tmp_path / "bart")
    result = publish(tmp_path / "bart", "someone/tiny-readonce", local_dir=tmp_path / "bart_out")
    assert {"generation_config.json", "modeling_readonce_bart.py", "representation_format.json",
            "tokenizer.json"} <= set(result.files)
    assert result.representation_format["settings"]["compression_ratio"] == 4
    assert ModelCard.load(tmp_path / "bart_out" / "README.md").data.pipeline_tag == "text2text-generation"

    gpt2 = RecurrentGPT2LMHeadModel(RecurrentGPT2Config(
        n_positions=32, n_embd=16, n_layer=2, n_head=2, vocab_size=30522, bos_token_id=101, eos_token_id=102,
        pad_token_id=0, window_size=16, window_overlap=4, recurrence_layer=1)).eval()
    gpt2.save_pretrained(tmp_path / "gpt2")
    tokenizer.save_pretrained(tmp_path / "gpt2")
    result = publish(tmp_path / "gpt2", "someone/tiny-recurrent", local_dir=tmp_path / "gpt2_out")
    assert "generation_config.json" in result.files and "representation_format.json" not in result.files
    card = ModelCard.load(tmp_path / "gpt2_out" / "README.md")
    assert card.data.pipeline_tag == "text-generation" and "recurrent-transformer" in card.data.tags
    # transformers' own text-generation pipeline runs the published recurrent model beyond its 32 positions
    from transformers import pipeline

    prompt = " ".join(["emma", "knightley", "harriet"] * 20)
    generate = pipeline("text-generation", model=str(tmp_path / "gpt2_out"), trust_remote_code=True)
    assert generate(prompt, max_new_tokens=6, do_sample=False, return_full_text=False)[0]["generated_text"]
    inputs = generate.preprocess(prompt)  # the pipeline's own tokenization (this test's tokenizer is BERT's)
    assert inputs["input_ids"].shape[1] > 32  # beyond n_positions
    got = generate._forward(inputs, max_new_tokens=6, do_sample=False)["generated_sequence"][0]
    expected = gpt2.generate(**{k: inputs[k] for k in ("input_ids", "attention_mask")},
                             max_new_tokens=6, do_sample=False)
    assert torch.equal(got, expected)


def test_cli_publish_refuses_a_local_dir_inside_the_store(checkpoint_dir, store_dir, tmp_path, capsys):
    """`--local-dir` inside `--store` would add a repo folder to the store's own files (verify then reports an orphan
    shard): refused in one line, nothing written, the store as it was."""
    before = sorted(p.relative_to(store_dir) for p in store_dir.rglob("*"))
    inside = store_dir / "shards" / "newdir"
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(inside), "--store",
                     str(store_dir)]) == 2
    assert "is inside --store" in capsys.readouterr().err
    assert sorted(p.relative_to(store_dir) for p in store_dir.rglob("*")) == before


def test_bad_input(checkpoint_dir, tmp_path, capsys):
    with pytest.raises(ValueError, match="`repo_id` must be 'owner/name'"):
        publish(checkpoint_dir, "no-owner", local_dir=tmp_path / "a")
    with pytest.raises(TypeError, match="`repo_id` must be a str"):
        publish(checkpoint_dir, None, local_dir=tmp_path / "a")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError, match="`local_dir` .* is not an empty directory"):
        publish(checkpoint_dir, "a/b", local_dir=tmp_path / "full")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        publish(tmp_path / "absent", "a/b", local_dir=tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="`metrics` file"):
        publish(checkpoint_dir, "a/b", local_dir=tmp_path / "a", metrics=tmp_path / "none.json")
    from hf_readonce.weights import reference_qa_path

    with pytest.raises(ValueError, match="holds a 'bert' model"):
        publish(reference_qa_path(), "a/b", local_dir=tmp_path / "a")
    # the CLI says the same in its own words, exit status 2
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "bad", "--local-dir", str(tmp_path / "c")]) == 2
    assert "hf-readonce publish: error: `--repo-id` must be 'owner/name'" in capsys.readouterr().err
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(tmp_path / "full")]) == 2
    assert "error: `--local-dir` " in capsys.readouterr().err  # the option, not publish()'s argument name
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(tmp_path / "c"),
                     "--store", str(tmp_path / "nostore")]) == 2
    assert "no store at" in capsys.readouterr().err
    # --dataset-type / --dataset-name describe a --metrics file: without one they are an error, not a traceback
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(tmp_path / "d"),
                     "--dataset-type", "quoref"]) == 2
    err = capsys.readouterr().err
    assert "['dataset_type'] describe the evaluation in a metrics file" in err and "Traceback" not in err
    assert not (tmp_path / "d").exists()


def test_cli_publish_local_dir(checkpoint_dir, tmp_path, capsys):
    metrics = tmp_path / "eval_results.json"
    metrics.write_text(json.dumps({"eval_exact_match": 12.5, "eval_f1": 20.25, "eval_NoAns_total": 0,
                                   "baselines": {"first_span": {"exact_match": 1.0, "f1": 9.5}},
                                   "speedup_precomputed": 2.26, "speedup_including_encoding": 1.35,
                                   "flop_ratio_precomputed": 2.41, "flop_ratio_including_encoding": 1.52,
                                   "speed_questions": 300, "train_seconds": 448.9}))
    out = tmp_path / "repo"
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "someone/tiny", "--local-dir", str(out),
                     "--metrics", str(metrics), "--dataset-type", "quoref", "--dataset-name", "Quoref"]) == 0
    assert f"to {out}" in capsys.readouterr().out
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    values = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert values == {("quoref", "EM"): 12.5, ("quoref", "F1"): 20.25}
    assert "| Quoref, validation | F1 | **20.25** | 9.50 |" in card.text
    assert ("2.26x with passage states precomputed (FLOP ratio 2.41x), 1.35x including encoding them (FLOP ratio "
            "1.52x)") in card.text
    # the demo's speed-ups, medians of interleaved rounds: the card gives the rounds and the range beside each
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "speed_rounds": 3,
                                   "speedup_precomputed_range": [2.1, 2.4],
                                   "speedup_including_encoding_range": [1.3, 1.41]}))
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "someone/tiny", "--local-dir", str(tmp_path / "r2"),
                     "--metrics", str(metrics), "--dataset-type", "quoref", "--dataset-name", "Quoref"]) == 0
    text = (tmp_path / "r2" / "README.md").read_text()
    assert ("timed on 300 questions (median of 3 interleaved rounds): 2.26x (range 2.10-2.40x) with passage states "
            "precomputed (FLOP ratio 2.41x), 1.35x (range 1.30-1.41x) including encoding them (FLOP ratio 1.52x)"
            ) in text
    assert "busy machine" not in text  # an idle run's figures stand as they are
    # timed on a busy machine (the demo printed "the speed-up is unreliable"): the card says so beside the figures
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "speed_load_average": 4.62, "speed_cpus": 2,
                                   "speedup_including_encoding_range": [0.96, 1.6]}))
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "someone/tiny", "--local-dir", str(tmp_path / "r3"),
                     "--metrics", str(metrics), "--dataset-type", "quoref", "--dataset-name", "Quoref"]) == 0
    text = (tmp_path / "r3" / "README.md").read_text()
    assert ("These speed-ups were timed on a busy machine (1-minute load average 4.62 on 2 usable CPUs; the rounds' "
            "speed-ups including encoding range 0.96-1.60x): they are unreliable.") in text, text


def _fp16_checkpoint(source, tokenizer):
    """A tiny DeFormer recording SETTINGS, saved in float16 with its tokenizer (as the shipped checkpoints are)."""
    model = tiny_model()
    for name, value in SETTINGS.items():
        setattr(model.config, name, value)
    model.half().save_pretrained(source)
    tokenizer.save_pretrained(source)
    return source


def test_published_representations_are_read_by_the_published_model(tmp_path, tokenizer):
    """A checkpoint saved in float16 whose store `encode` filled computing in float32 (the CPU default): `publish
    --store` declares the float32 fingerprint (the store's), and the published folder's own model, whose config now
    carries `custom_pipelines`, has that same fingerprint (the key is ignored by every family's fingerprint)."""
    from transformers import AutoModelForQuestionAnswering

    from hf_readonce import DeformerBertForQuestionAnswering
    from hf_readonce.representations import DeformerBertAdapter, fill_store

    source = _fp16_checkpoint(tmp_path / "fp16", tokenizer)
    computing = DeformerBertForQuestionAnswering.from_pretrained(source, dtype=torch.float32).eval()
    store = RepresentationStore(tmp_path / "store")
    fill_store(DeformerBertAdapter(computing, tokenizer, max_passage_length=24, doc_stride=8), store, CONTEXTS)
    result = publish(source, "someone/fp16", local_dir=tmp_path / "repo", store=store)
    assert result.representation_format["fingerprint"] == computing.representation_fingerprint()
    published = AutoModelForQuestionAnswering.from_pretrained(result.folder, trust_remote_code=True,
                                                              dtype=torch.float32)
    assert published.config.custom_pipelines  # (in this process transformers picks the registered class)
    assert published.representation_fingerprint() == computing.representation_fingerprint()


def test_a_published_format_fits_stores_computed_on_a_cpu_or_on_cuda(tmp_path, tokenizer):
    """Published without a store, a float16 checkpoint declares the fingerprints of both compute dtypes
    `--compute-dtype auto` picks (float32 on a CPU, float16 on CUDA): stores encoded either way fit (it declared the
    float16 one alone, so every store `hf-readonce encode` filled on a CPU was refused); another model's is refused
    naming the compute dtypes declared."""
    from hf_readonce import DeformerBertForQuestionAnswering
    from hf_readonce.representations import DeformerBertAdapter, fill_store

    source = _fp16_checkpoint(tmp_path / "fp16", tokenizer)
    fmt = publish(source, "someone/fp16", local_dir=tmp_path / "repo").representation_format
    assert set(fmt["fingerprints"]) == {"float32", "float16"} and fmt["model_dtype"] == "float16"
    assert load_representation_format(tmp_path / "repo")["fingerprints"] == fmt["fingerprints"]
    for dtype in (torch.float32, torch.float16):
        computing = DeformerBertForQuestionAnswering.from_pretrained(source, dtype=dtype).eval()
        store = RepresentationStore(tmp_path / f"store-{dtype}")
        fill_store(DeformerBertAdapter(computing, tokenizer, max_passage_length=24, doc_stride=8), store, CONTEXTS)
        assert check_store_format(store, fmt).fingerprint == computing.representation_fingerprint()
    other = RepresentationStore(tmp_path / "other")
    fill_store(DeformerBertAdapter(tiny_model(seed=1), tokenizer, max_passage_length=24, doc_stride=8), other,
               CONTEXTS)
    with pytest.raises(RepresentationMismatchError, match=r"computed in float16\).*is none of the declared"):
        check_store_format(other, fmt)


def test_cli_publish_declares_the_settings_the_store_was_encoded_with(checkpoint_dir, tmp_path, qa_rows, capsys):
    """A store encoded with another window than the checkpoint records: `publish --store` says which settings the
    store holds and the options that declare them; with those options the format declares them and the store
    passes."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(row) + "\n" for row in qa_rows[:2]))
    store = tmp_path / "store"
    assert cli_main(["encode", str(checkpoint_dir), "--documents", str(docs), "--store", str(store),
                     "--max-passage-length", "48", "--doc-stride", "8", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(tmp_path / "out"),
                     "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "Or publish what it holds: this checkpoint's representations with {'max_passage_length': 48}" in err, err
    assert "(on the command line `--max-passage-length 48`)" in err and not (tmp_path / "out").exists()
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(tmp_path / "out"),
                     "--store", str(store), "--doc-stride", "8", "--max-passage-length", "48"]) == 0
    declared = json.loads((tmp_path / "out" / "representation_format.json").read_text())["settings"]
    assert (declared["max_passage_length"], declared["doc_stride"]) == (48, 8)


def test_publish_setting_options_are_checked_in_the_cli_words(checkpoint_dir, tmp_path, capsys):
    """Another family's option, or any for a family that stores nothing, is refused by name; a recorded 0 (a
    doc_stride) is the declared value, as `encode` reads it."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from hf_readonce.hub.publish import representation_format_for

    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(tmp_path / "o"),
                     "--mentions", "capitalized_mentions"]) == 2
    err = capsys.readouterr().err
    assert "--mentions does not apply to deformer_bert models; their options are --max-passage-length" in err, err
    from hf_readonce.weights import reference_qa_path

    assert cli_main(["publish", str(reference_qa_path()), "--repo-id", "a/b", "--local-dir", str(tmp_path / "o"),
                     "--mentions", "capitalized_mentions"]) == 2  # a plain BERT: refused as such, not by option
    err = capsys.readouterr().err
    assert "holds a 'bert' model" in err and "does not apply" not in err and "`model_dir`" not in err, err
    assert f"MODEL_DIR {str(reference_qa_path())!r} holds a 'bert' model" in err, err  # which folder, as typed or found
    with pytest.raises(ValueError, match="recurrent_gpt2 models store no representations"):
        representation_format_for(SimpleNamespace(config=SimpleNamespace(model_type="recurrent_gpt2")), None,
                                  settings={"max_passage_length": 77})
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = 32, 0
    tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir)
    assert representation_format_for(model, tokenizer)["settings"]["doc_stride"] == 0
    # the declared storage dtype is `store_dtype` (the format's `dtype` field); `dtype=`, the compute dtype's name, is
    # refused naming it, in `publish` too (before the checkpoint is read)
    assert representation_format_for(model, tokenizer, store_dtype="bf16")["dtype"] == "bfloat16"
    with pytest.raises(TypeError, match=r"^representation_format_for\(\) takes the storage dtype as `store_dtype`"):
        representation_format_for(model, tokenizer, dtype="bf16")
    with pytest.raises(TypeError, match=r"^publish\(\) takes the storage dtype as `store_dtype`"):
        publish(checkpoint_dir, "a/b", local_dir=tmp_path / "p", dtype="bf16")
    assert not (tmp_path / "p").exists()


def test_a_readtwice_checkpoint_of_the_paper_layout_publishes_without_a_representation_format(tmp_path, tokenizer):
    # with the question in its first read (the paper's layout) a ReadTwice stores nothing: publish refused it
    # ("first reads are document-only (storable) only with question_in_first_read=False"); it now writes the folder
    # without representation_format.json, and the folder answers where hf-readonce is absent
    from hf_readonce.hub.publish import representation_format_for
    from hf_readonce.representations import ReadTwiceBertAdapter
    from tests.hub.test_pipeline_readtwice import tiny_readtwice

    model = tiny_readtwice(question_in_first_read=True)
    assert not ReadTwiceBertAdapter.stores_representations(model)
    assert ReadTwiceBertAdapter.stores_representations(tiny_readtwice(question_in_first_read=False))
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    result = publish(tmp_path / "ckpt", "someone/tiny-readtwice-paper", local_dir=tmp_path / "out")
    assert result.representation_format is None and "representation_format.json" not in result.files
    assert {"pipeline_readtwice_bert.py", "modeling_readtwice_bert.py", "README.md"} <= set(result.files)
    with pytest.raises(ValueError, match="this readtwice_bert model stores no representations"):
        representation_format_for(model, tokenizer, settings={"mentions": "capitalized_mentions"})
    with pytest.raises(ValueError, match="this readtwice_bert model stores no representations"):
        publish(tmp_path / "ckpt", "someone/tiny-readtwice-paper", local_dir=tmp_path / "out2",
                store=RepresentationStore(tmp_path / "store"))
    run = run_without_hf_readonce(f"""
        from transformers import pipeline
        qa = pipeline("question-answering", model={str(tmp_path / 'out')!r}, trust_remote_code=True)
        answers = qa(question=["Who wrote Emma?", "When?"], context={CONTEXTS[0]!r})
        assert len(answers) == 2 and all(set(a) == {{"score", "start", "end", "answer"}} for a in answers), answers
        print("OK")
    """)
    assert run.returncode == 0 and "OK" in run.stdout, run.stderr[-3000:]


def test_setting_options_for_a_readtwice_of_the_paper_layout_are_refused_in_the_cli_words(tmp_path, tokenizer, capsys):
    # such a checkpoint stores nothing, so `--mentions` has nothing to declare: the error named publish()'s argument
    # (`settings` ['mentions']) where the command line took the option
    from tests.hub.test_pipeline_readtwice import tiny_readtwice

    tiny_readtwice(question_in_first_read=True).save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    assert cli_main(["publish", str(tmp_path / "ckpt"), "--repo-id", "a/b", "--local-dir", str(tmp_path / "o"),
                     "--mentions", "capitalized_mentions"]) == 2
    err = capsys.readouterr().err
    assert "--mentions does not apply: this readtwice_bert model stores no representations" in err, err
    assert "`settings`" not in err and not (tmp_path / "o").exists()


def test_the_exported_representations_carry_no_model_name(published, store_dir, checkpoint_dir):
    """A store records the model that wrote each space, a local folder as its absolute path (it may name a user's
    home): the dataset `publish` writes (and uploads) from it carries no such name, in no row, column or metadata,
    nor does its card, so an import lists none."""
    import pyarrow.parquet as pq

    store = RepresentationStore(store_dir, create=False, readonly=True)
    assert [space["model_names"] for space in store.info()["spaces"].values()] == [[str(checkpoint_dir)]]
    table = pq.read_table(published.representations_dir / "data" / "train-00000-of-00001.parquet")
    assert "model_name" not in table.column_names
    shipped = [json.dumps(table.to_pylist(), default=repr), repr(table.schema.metadata)]
    shipped += [p.read_text() for p in published.representations_dir.rglob("*.md")]
    assert not any(str(checkpoint_dir) in text or checkpoint_dir.name in text for text in shipped)


def test_cli_publish_a_dtype_the_store_does_not_hold_says_what_the_cli_takes(checkpoint_dir, store_dir, tmp_path,
                                                                           capsys):
    """`publish --store S --dtype bf16` over an fp16 store was told to "pass check_dtype=False", an argument of
    `check_store_format` no command takes: the CLI says what --store-dtype (given here by its other spelling,
    `--dtype`) does instead, and publishes without it."""
    folder = tmp_path / "hub"
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(folder), "--store",
                     str(store_dir), "--dtype", "bf16", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "as float16; the checkpoint declares bfloat16 (`--store-dtype` declares it; without --store-dtype, the " \
           "dtype the store holds is declared where it holds one)" in err and "check_dtype" not in err, err
    assert not folder.exists()
    assert cli_main(["publish", str(checkpoint_dir), "--repo-id", "a/b", "--local-dir", str(folder), "--store",
                     str(store_dir), "--no-progress"]) == 0
    assert json.loads((folder / "representation_format.json").read_text())["dtype"] == "float16"
