"""Every model family publishes to a local folder that loads where hf_readonce is absent: `publish(...,
local_dir=...)` on a tiny random model of each family (DeFormer, ReadOnce BART, ReadTwice, recurrent GPT-2 and Llama,
LongDoc BART, block-attention Llama), then, in one fresh process where `import hf_readonce` fails,
`AutoModel*.from_pretrained(folder, trust_remote_code=True)` gives the in-process model's outputs exactly and
`pipeline(task, model=folder, trust_remote_code=True)` the in-process pipeline's outputs. The folders' config and
card metadata are checked per family."""

import json

import pytest
import torch

from tests.hub.family_cases import (
    CASE_BY_NAME,
    CASES,
    assert_same_as_in_process,
    load_without_hf_readonce,
    publish_all,
)
from tests.models.block_attention_llama.cases import LLAMA_PROMPT, tiny_block_attention

NAMES = [case.name for case in CASES]


@pytest.fixture(scope="module")
def published(tmp_path_factory, tokenizer):
    return publish_all(tmp_path_factory.mktemp("families"), tokenizer)


@pytest.fixture(scope="module")
def loaded(published, tmp_path_factory):
    return load_without_hf_readonce({name: entry["folder"] for name, entry in published.items()},
                                    tmp_path_factory.mktemp("fresh_process"))


@pytest.mark.parametrize("name", NAMES)
def test_family_loads_and_runs_without_hf_readonce(name, published, loaded):
    assert_same_as_in_process(name, loaded[name], published[name])


@pytest.mark.parametrize("name", NAMES)
def test_family_folder_and_card(name, published):
    from huggingface_hub import ModelCard

    from hf_readonce.representations import family_of

    case, entry = CASE_BY_NAME[name], published[name]
    folder, files = entry["folder"], entry["result"].files
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == name and case.auto_class in config["auto_map"]
    assert set(config["auto_map"]) == {"AutoConfig", *family_of(name).model_classes(name)}  # every head loads
    module = config["auto_map"][case.auto_class].split(".")[0]
    assert f"{module}.py" in files and "model.safetensors" in files and "tokenizer.json" in files
    pipelines = family_of(name).pipelines
    if pipelines:  # the family's own pipelines travel and are declared
        assert sorted(config["custom_pipelines"]) == sorted(pipelines)
        for task, pipeline_class in pipelines.items():
            pipeline_file = pipeline_class.__module__.rsplit(".", 1)[1] + ".py"
            assert pipeline_file in files
            assert config["custom_pipelines"][task]["impl"] == f"{pipeline_file[:-3]}.{pipeline_class.__name__}"
    else:  # transformers' own pipelines run it (block-attention Llama: text-generation)
        from transformers.pipelines import SUPPORTED_TASKS

        assert "custom_pipelines" not in config and {task for task, _, _ in case.calls} <= set(SUPPORTED_TASKS)
    if case.auto_class in ("AutoModelForSeq2SeqLM", "AutoModelForCausalLM"):
        assert "generation_config.json" in files
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == case.pipeline_tag
    assert card.data.tags == ["hf-readonce", case.method_tag, "custom_code"]
    from hf_readonce.hub.cards import card_widget

    widget = [dict(w) for w in card_widget(family_of(name).cards[name], case.pipeline_tag)] or None
    assert getattr(card.data, "widget", None) == widget  # (ModelCardData has no attribute for a card without one)
    if widget:  # every declared example runs through the published folder's pipeline, as the Hub widget calls it
        from transformers import pipeline

        pipe = pipeline(case.pipeline_tag, model=str(folder), trust_remote_code=True)
        for example in widget:
            assert set(example) <= {"text", "context"}, example
            if "context" in example:
                assert pipe(question=example["text"], context=example["context"])
            else:
                assert pipe(example["text"], max_new_tokens=4)
    assert "trust_remote_code=True" in card.text
    assert case.pipeline_tag in {task for task, _, _ in case.calls}


def test_block_attention_text_generation_is_llamas(tokenizer):
    """Without document caches, block-attention Llama under transformers' text-generation pipeline generates what
    `LlamaForCausalLM` with the same weights generates."""
    from transformers import LlamaConfig, LlamaForCausalLM, pipeline

    model = tiny_block_attention()
    llama = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in model.config.to_dict().items()
                                            if k not in ("model_type", "architectures", "auto_map")})).eval()
    assert llama.load_state_dict(model.state_dict()) is not None
    kwargs = {"max_new_tokens": 8, "do_sample": False, "return_full_text": False}
    ours = pipeline("text-generation", model=model, tokenizer=tokenizer)
    theirs = pipeline("text-generation", model=llama, tokenizer=tokenizer)
    assert ours(LLAMA_PROMPT, **kwargs) == theirs(LLAMA_PROMPT, **kwargs)
    ids = tokenizer(LLAMA_PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, llama(ids).logits)


def test_card_loading_lines_run_without_prompt_or_warning(published, tmp_path):
    """The `from_pretrained` lines of every generated card, run as written (the repo id replaced by the published
    folder) where hf_readonce cannot be imported and stdin is closed: no remote-code prompt (a custom config makes
    `AutoTokenizer` ask for it unless given `trust_remote_code=True`) and no "model of type" warning."""
    import re
    import subprocess
    import sys
    import textwrap

    from tests.conftest import BLOCK_HF_READONCE

    lines = []
    for name, entry in published.items():
        text = (entry["folder"] / "README.md").read_text()
        found = re.findall(r"^(?:model|tokenizer) = Auto\w+\.from_pretrained\(.*$", text, re.M)
        assert any(line.startswith("tokenizer") for line in found) or name == "readtwice_bert", name
        lines += [line.replace(f'"{entry["repo_id"]}"', repr(str(entry["folder"]))) for line in found]
    auto_classes = sorted({re.search(r"= (Auto\w+)\.", line).group(1) for line in lines})  # what the cards use
    lines = [f"from transformers import {', '.join(auto_classes)}", *lines, "print('LOADED')"]
    script = BLOCK_HF_READONCE + "\n" + textwrap.dedent("\n".join(lines))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=600, cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": "",
                                                          "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0 and "LOADED" in done.stdout, done.stderr[-3000:]
    for noise in ("custom code", "trust_remote_code", "to instantiate a model of type", "[y/N]"):
        assert noise not in done.stderr + done.stdout, done.stderr[-3000:]


def test_card_model_code_runs_as_written(published, tmp_path):
    """Every code block of every family's generated card, run as written (repo id -> the published folder) where
    hf_readonce cannot be imported: every name is defined by the card itself (examples included), and a BERT
    tokenizer's `token_type_ids` never reach `generate` (BART takes none)."""
    import re

    from tests.conftest import run_without_hf_readonce

    code, ran = [], []
    for name, entry in published.items():
        blocks = re.findall(r"```python\n(.*?)```", (entry["folder"] / "README.md").read_text(), re.S)
        for number, block in enumerate(blocks):
            code += [block.replace(f'"{entry["repo_id"]}"', repr(str(entry["folder"]))),
                     f"print({name!r}, {number}, 'RAN')"]
            ran.append(f"{name} {number} RAN")
    done = run_without_hf_readonce("\n".join(code), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(line in done.stdout for line in ran) and len(ran) >= 8, (ran, done.stdout[-2000:])
