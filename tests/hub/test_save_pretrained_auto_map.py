"""A folder written by `save_pretrained` (not only one `hf-readonce publish` assembles) loads through every Auto class
its family registers, with `trust_remote_code=True`, in a process where hf-readonce cannot be imported: transformers
writes only the saved class's own Auto class into `auto_map`, so `AutoModel.from_pretrained(folder)` of a saved
question-answering or summarization model failed there."""

import json

import pytest

from hf_readonce.representations import registered_families
from tests.conftest import run_without_hf_readonce
from tests.hub.family_cases import CASES

# one case per model type whose family registers it under several Auto classes
MULTI_HEAD = {}
for _case in CASES:
    _model_type = _case.build().config.model_type
    _heads = next(spec for spec in registered_families().values() if _model_type in spec.model_types).model_classes(
        _model_type)
    if len(_heads) > 1:
        MULTI_HEAD.setdefault(_model_type, (_case, _heads))


def test_the_families_with_several_heads_are_covered():
    assert {"deformer_bert", "longdoc_bart", "readtwice_bert", "readonce_bart", "block_attention_llama"} <= set(
        MULTI_HEAD)


def test_a_saved_folder_loads_through_every_auto_class_without_hf_readonce(tmp_path):
    expected = {}
    for model_type, (case, heads) in MULTI_HEAD.items():
        model = case.build()
        before = model.representation_fingerprint() if hasattr(model, "representation_fingerprint") else None
        folder = tmp_path / model_type
        model.save_pretrained(folder)
        if before is not None:  # the auto_map written into the config is not part of the fingerprint
            assert model.representation_fingerprint() == before
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        assert set(heads) <= set(auto_map), auto_map
        expected[str(folder)] = {head: cls.__name__ for head, cls in heads.items()}
    result = run_without_hf_readonce(f"""
        import json, transformers
        loaded = {{}}
        for folder, heads in {expected!r}.items():
            loaded[folder] = {{head: type(getattr(transformers, head).from_pretrained(folder, trust_remote_code=True))
                               .__name__ for head in heads}}
        print(json.dumps(loaded))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


@pytest.mark.parametrize("model_type", ["deformer_bert"])
def test_entries_a_config_already_has_are_kept(tmp_path, model_type):
    case, heads = MULTI_HEAD[model_type]
    model = case.build()
    model.config.auto_map = {"AutoModel": "my_module.MyModel"}
    model.save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModel"] == "my_module.MyModel" and set(heads) <= set(auto_map)
