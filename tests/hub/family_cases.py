"""Every model family as a Hub user meets it: a tiny random model of each family with the MiniLM tokenizer, published
with `publish`, then loaded in ONE fresh process where `import hf_readonce` fails (by folder, or by repo id from the
local Hub server) with `AutoModel*.from_pretrained(..., trust_remote_code=True)` and `pipeline(task, ...,
trust_remote_code=True)`. The same probe code runs on the in-process model, and the same pipeline calls on the
package's pipelines, so the two sides can be compared value for value.

Used by `tests/hub/test_publish_families.py` (folders) and `tests/hub/test_local_hub_server.py` (repo ids). One
subprocess loads all families: importing torch and transformers dominates a fresh process's time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tests.conftest import BLOCK_HF_READONCE, tiny_model
from tests.hub.test_pipeline_deformer import CONTEXTS, QUESTIONS
from tests.hub.test_pipeline_readonce import DOCUMENTS, TEXTS, tiny_readonce
from tests.hub.test_pipeline_readtwice import tiny_readtwice

READTWICE_DOCUMENT = " ".join(CONTEXTS)  # about 110 tokens: several 24-token segments
LONG_DOCUMENTS = [CONTEXTS[0] + " " + CONTEXTS[1], CONTEXTS[1]]
# about 60 MiniLM tokens: beyond the recurrent models' 32 positions, read in 16-token windows
RECURRENT_PROMPT = " ".join(["emma", "knightley", "harriet"] * 20)
LLAMA_PROMPT = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home"
DEFORMER_SETTINGS = {"max_question_length": 16, "max_passage_length": 24, "doc_stride": 8}
LLAMA_TINY = dict(vocab_size=30522, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, bos_token_id=101, eos_token_id=102, pad_token_id=0)
GENERATE = {"max_new_tokens": 6, "do_sample": False, "return_full_text": False}


def tiny_recurrent(family: str):
    from hf_readonce import (
        RecurrentGPT2Config,
        RecurrentGPT2LMHeadModel,
        RecurrentLlamaConfig,
        RecurrentLlamaForCausalLM,
    )

    torch.manual_seed(0)
    recurrence = dict(window_size=16, window_overlap=4, recurrence_layer=1)
    if family == "gpt2":
        model = RecurrentGPT2LMHeadModel(RecurrentGPT2Config(
            n_positions=32, n_embd=16, n_layer=2, n_head=2, vocab_size=30522, bos_token_id=101, eos_token_id=102,
            pad_token_id=0, **recurrence))
    else:
        model = RecurrentLlamaForCausalLM(RecurrentLlamaConfig(max_position_embeddings=32, **LLAMA_TINY, **recurrence))
    with torch.no_grad():  # non-zero pooling weights: the memory reaches the next window
        model.recurrence.pooling.layer_logits.normal_()
    return model.eval()


def tiny_longdoc():
    from hf_readonce import LongDocBartConfig, LongDocBartForConditionalGeneration

    torch.manual_seed(0)
    # neighborhood attention with r = 4, shorter than the documents; init_std 0.5 so that the summaries depend on
    # the document (at 0.2 this tiny model writes the same words for every document)
    return LongDocBartForConditionalGeneration(LongDocBartConfig(
        vocab_size=30522, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=128,
        encoder_attention_type="neighborhood", neighborhood_radius=4, init_std=0.5, pad_token_id=0, bos_token_id=101,
        eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None)).eval()


def tiny_block_attention():
    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM

    torch.manual_seed(0)
    return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(max_position_embeddings=128, **LLAMA_TINY)).eval()


def _deformer():
    model = tiny_model()
    for name, value in DEFORMER_SETTINGS.items():
        setattr(model.config, name, value)
    return model


def _readtwice():
    model = tiny_readtwice(False)
    model.config.max_question_length = 12
    return model


@dataclass
class FamilyCase:
    """One family: how to build it, the Auto class that loads it, a probe (Python source run with `model`,
    `tokenizer` and `torch` in scope, under `torch.no_grad()`, that sets `outputs`, a dict of tensors) and the
    pipeline calls `(task, args, kwargs)` a user makes."""

    name: str
    build: object
    auto_class: str
    probe: str
    calls: list = field(default_factory=list)
    pipeline_tag: str = ""
    method_tag: str = ""


CASES = [
    FamilyCase("deformer_bert", _deformer, "AutoModelForQuestionAnswering", f"""
enc = tokenizer({QUESTIONS[0][0]!r}, {CONTEXTS[0]!r}, return_tensors="pt")
out = model(**enc)
outputs = {{"start_logits": out.start_logits, "end_logits": out.end_logits}}
""", [("question-answering", [], {"question": QUESTIONS[0], "context": CONTEXTS[0], "top_k": 2})],
        "question-answering", "deformer"),
    FamilyCase("readonce_bart", tiny_readonce, "AutoModelForSeq2SeqLM", f"""
doc = tokenizer([{DOCUMENTS[0]!r}], return_tensors="pt")
reps = model.encode_documents(doc.input_ids, doc.attention_mask)
q = tokenizer([{TEXTS[0]!r}], return_tensors="pt")
out = model(input_ids=q.input_ids, attention_mask=q.attention_mask, decoder_input_ids=torch.tensor([[101, 2040, 2626]]),
            document_representations=reps)
outputs = {{"representations": reps.representations, "logits": out.logits}}
""", [("text2text-generation", [TEXTS], {"document": DOCUMENTS[0], "max_new_tokens": 5}),
      ("summarization", [DOCUMENTS], {"max_new_tokens": 5})], "text2text-generation", "readonce"),
    FamilyCase("readtwice_bert", _readtwice, "AutoModelForQuestionAnswering", f"""
enc = tokenizer({READTWICE_DOCUMENT!r}, truncation=True, max_length=24, stride=6, return_overflowing_tokens=True,
                padding=True, return_tensors="pt")
q = tokenizer({QUESTIONS[0][0]!r}, return_tensors="pt")
out = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, token_type_ids=torch.ones_like(enc.input_ids),
            question_input_ids=q.input_ids)
outputs = {{"start_logits": out.start_logits, "end_logits": out.end_logits}}
""", [("question-answering", [], {"question": QUESTIONS[0], "context": READTWICE_DOCUMENT, "top_k": 2})],
        "question-answering", "readtwice"),
    FamilyCase("recurrent_gpt2", lambda: tiny_recurrent("gpt2"), "AutoModelForCausalLM", f"""
ids = tokenizer({RECURRENT_PROMPT!r}, return_tensors="pt").input_ids
assert ids.shape[1] > 32  # beyond n_positions
outputs = {{"logits": model(input_ids=ids).logits, "generated": model.generate(ids, max_new_tokens=6, do_sample=False)}}
""", [("text-generation", [RECURRENT_PROMPT], GENERATE)], "text-generation", "recurrent-transformer"),
    FamilyCase("recurrent_llama", lambda: tiny_recurrent("llama"), "AutoModelForCausalLM", f"""
ids = tokenizer({RECURRENT_PROMPT!r}, return_tensors="pt").input_ids
assert ids.shape[1] > 32  # beyond max_position_embeddings
outputs = {{"logits": model(input_ids=ids).logits, "generated": model.generate(ids, max_new_tokens=6, do_sample=False)}}
""", [("text-generation", [RECURRENT_PROMPT], GENERATE)], "text-generation", "recurrent-transformer"),
    FamilyCase("longdoc_bart", tiny_longdoc, "AutoModelForSeq2SeqLM", f"""
enc = tokenizer({LONG_DOCUMENTS[0]!r}, return_tensors="pt")
out = model(**enc, decoder_input_ids=torch.tensor([[101, 2040, 2626]]))
outputs = {{"encoder": out.encoder_last_hidden_state, "logits": out.logits}}
""", [("summarization", [LONG_DOCUMENTS + LONG_DOCUMENTS[:1]], {"max_new_tokens": 6}),
      ("summarization", [LONG_DOCUMENTS[1]], {"max_new_tokens": 4, "num_beams": 2,
                                              "generate_kwargs": {"num_return_sequences": 2}})],
        "summarization", "longdoc"),
    FamilyCase("block_attention_llama", tiny_block_attention, "AutoModelForCausalLM", f"""
doc = tokenizer({CONTEXTS[1]!r}, return_tensors="pt").input_ids
question = tokenizer({QUESTIONS[1][0]!r}, add_special_tokens=False, return_tensors="pt").input_ids
outputs = {{"logits": model(torch.cat([doc, question], dim=1)).logits,
            "composed": model(question, document_caches=model.encode_documents(doc)).logits}}
""", [("text-generation", [LLAMA_PROMPT], GENERATE)], "text-generation", "block-attention"),
]
CASE_BY_NAME = {case.name: case for case in CASES}


def run_probe(case: FamilyCase, model, tokenizer) -> dict:
    """`case.probe` on `model`: the dict of tensors it sets as `outputs`."""
    namespace = {"model": model, "tokenizer": tokenizer, "torch": torch}
    with torch.no_grad():
        exec(case.probe, namespace)
    return namespace["outputs"]


def in_process_pipeline(task: str, model, tokenizer):
    """The pipeline a user of the package gets in-process for `task` and this model: the family's own pipeline
    class (transformers keeps one class per task, so it is built directly) or transformers' text-generation."""
    from transformers import pipeline

    from hf_readonce.hub.publish import FAMILIES

    _, module, pipelines = FAMILIES[model.config.model_type]
    for pipeline_task, class_name in pipelines:
        if pipeline_task == task:
            import importlib

            return getattr(importlib.import_module(module), class_name)(model=model, tokenizer=tokenizer)
    return pipeline(task, model=model, tokenizer=tokenizer)


def publish_all(root: Path, tokenizer, repo_prefix: str = "someone/tiny-") -> dict:
    """Publish every case under `root`. Returns name -> {"repo_id", "folder", "result", "probe", "pipelines"}, with
    the in-process model's probe outputs and pipeline outputs (JSON-normalized)."""
    from hf_readonce.hub.publish import publish

    published = {}
    for case in CASES:
        model = case.build()
        source = root / "checkpoints" / case.name
        model.save_pretrained(source)
        tokenizer.save_pretrained(source)
        repo_id = repo_prefix + case.name.replace("_", "-")
        result = publish(source, repo_id, local_dir=root / "published" / case.name)
        outputs = []
        for task, args, kwargs in case.calls:
            pipe = in_process_pipeline(task, model, tokenizer)
            outputs.append(json.loads(json.dumps(pipe(*args, **kwargs))))
        published[case.name] = {"repo_id": repo_id, "folder": result.folder, "result": result,
                                "probe": run_probe(case, model, tokenizer), "pipelines": outputs}
    return published


LOADER = """
import json, os, sys, traceback
try:
    import hf_readonce
    raise SystemExit("hf_readonce was importable")
except ImportError:
    pass
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoTokenizer, pipeline

spec = json.load(open(SPEC))
torch.set_num_threads(spec["threads"])
results = {}
for case in spec["cases"]:
    name, source = case["name"], case["source"]
    result = results[name] = {"error": None}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = getattr(transformers, case["auto_class"]).from_pretrained(source, trust_remote_code=True).eval()
        result["model_class"] = type(model).__module__ + "." + type(model).__name__
        namespace = {"model": model, "tokenizer": tokenizer, "torch": torch}
        with torch.no_grad():
            exec(case["probe"], namespace)
        save_file({k: v.contiguous() for k, v in namespace["outputs"].items()}, name + ".safetensors")
        result["pipelines"] = []
        for task, args, kwargs in case["calls"]:
            pipe = pipeline(task, model=source, trust_remote_code=True)
            result["pipelines"].append({"class": type(pipe).__module__ + "." + type(pipe).__name__,
                                        "model_class": type(pipe.model).__module__ + "." + type(pipe.model).__name__,
                                        "output": pipe(*args, **kwargs)})
    except Exception:
        result["error"] = traceback.format_exc()
json.dump(results, open("results.json", "w"))
print("DONE", sorted(results))
"""


def load_without_hf_readonce(sources: dict, workdir: Path, env: dict | None = None, timeout: int = 600) -> dict:
    """Load every case from `sources` (name -> folder or repo id) in one fresh process where `import hf_readonce`
    fails. Returns name -> {"error", "model_class", "pipelines": [{"class", "model_class", "output"}], "probe":
    dict of tensors}; raises AssertionError with the process's stderr if it fails as a whole."""
    from safetensors.torch import load_file

    workdir.mkdir(parents=True, exist_ok=True)
    spec = {"threads": torch.get_num_threads(),
            "cases": [{"name": name, "source": str(source), "auto_class": CASE_BY_NAME[name].auto_class,
                       "probe": CASE_BY_NAME[name].probe, "calls": CASE_BY_NAME[name].calls}
                      for name, source in sources.items()]}
    (workdir / "spec.json").write_text(json.dumps(spec))
    script = BLOCK_HF_READONCE + f"\nSPEC = {str(workdir / 'spec.json')!r}\n" + textwrap.dedent(LOADER)
    if env is None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    run = subprocess.run([sys.executable, "-c", script], cwd=workdir, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert run.returncode == 0 and (workdir / "results.json").is_file(), run.stderr[-5000:]
    results = json.loads((workdir / "results.json").read_text())
    for name, result in results.items():
        if result["error"] is None:
            result["probe"] = load_file(workdir / f"{name}.safetensors")
    return results


def assert_same_as_in_process(name: str, loaded: dict, expected: dict) -> None:
    """The loaded model's probe outputs equal the in-process model's (exactly), its class comes from the folder's
    own code (`transformers_modules`), and each pipeline is the family's (not hf_readonce's) with the in-process
    pipeline's output."""
    assert loaded["error"] is None, f"{name}:\n{loaded['error']}"
    assert loaded["model_class"].startswith("transformers_modules."), loaded["model_class"]
    probe = loaded["probe"]
    assert probe.keys() == expected["probe"].keys()
    for key, value in expected["probe"].items():
        assert probe[key].shape == value.shape and probe[key].dtype == value.dtype, key
        assert torch.equal(probe[key], value), f"{name}: {key} differs by {(probe[key] - value).abs().max()}"
    case = CASE_BY_NAME[name]
    assert len(loaded["pipelines"]) == len(case.calls)
    for (task, _, _), got, want in zip(case.calls, loaded["pipelines"], expected["pipelines"]):
        assert "hf_readonce" not in got["class"] and "hf_readonce" not in got["model_class"], got
        assert got["model_class"].startswith("transformers_modules."), got["model_class"]
        assert got["output"] == want, f"{name} {task}: {got['output']} != {want}"
        assert any(text.strip() for text in _texts(want)), f"{name} {task}: only empty outputs, nothing compared"


def _texts(output) -> list:
    """The answer / generated / summary strings anywhere in a pipeline output."""
    if isinstance(output, dict):
        return [v for k, v in output.items() if k in ("answer", "generated_text", "summary_text")]
    if isinstance(output, list):
        return [text for item in output for text in _texts(item)]
    return []
