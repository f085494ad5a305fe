"""Helper of `test_backward_compat.py`: compare a 0.1.0 fixture checkpoint with the outputs 0.1.0 recorded (also
imported by a subprocess in which hf_readonce cannot be imported)."""

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForQuestionAnswering, AutoModelForSeq2SeqLM

AUTO = {"deformer_bert": AutoModelForQuestionAnswering, "readonce_bart": AutoModelForSeq2SeqLM,
        "recurrent_gpt2": AutoModelForCausalLM, "recurrent_llama": AutoModelForCausalLM}


def check(name, path, expected_path, remote_code=True):
    """Load `path` (with `trust_remote_code=True`, or registered in process) and compare with 0.1.0's outputs."""
    model = AUTO[name].from_pretrained(path, trust_remote_code=remote_code).eval()
    assert ("hf_readonce" in type(model).__module__) != remote_code, type(model).__module__
    e = {k.split(".", 1)[1]: v for k, v in load_file(expected_path).items() if k.startswith(name + ".")}
    with torch.no_grad():
        if name == "deformer_bert":
            got = model(e["input_ids"], token_type_ids=e["token_type_ids"]).start_logits
            torch.testing.assert_close(got, e["start_logits"], atol=1e-5, rtol=0)
        elif name == "readonce_bart":
            reps = model.encode_documents(e["document"])
            torch.testing.assert_close(reps.representations, e["representations"], atol=1e-5, rtol=0)
            got = model.generate(e["question"], document_representations=reps, max_new_tokens=4, min_new_tokens=4,
                                 do_sample=False)
            assert torch.equal(got, e["generated"])
        else:
            torch.testing.assert_close(model(e["input_ids"], use_cache=False).logits, e["logits"], atol=1e-5, rtol=0)
