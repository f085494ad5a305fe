"""Store integrity: `repair` deletes nothing (leftovers of `tmp/` go to `quarantine/`, and are reported), never
moves a file through a `quarantine` that is a link or not a folder (verify names it, repair refuses before changing
anything), and `put` refuses an overflow hidden beside a NaN and a `meta` that is not a dict, naming it."""

import pytest
import torch

from hf_readonce.store import RepresentationStore, content_hash
from tests.store.test_campaign import FP, SETTINGS


@pytest.mark.parametrize("special", [float("nan"), float("inf"), -float("inf")])
def test_fp16_overflow_beside_a_nan_or_inf_is_refused(tmp_path, special):
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(ValueError, match="overflows float16"):
        store.put(FP, SETTINGS, content_hash("a"), {"x": torch.tensor([special, 1e6])}, dtype="float16")
    assert len(store) == 0
    # NaN and inf already in the input are stored as given (beside values that fit)
    assert store.put(FP, SETTINGS, content_hash("b"), {"x": torch.tensor([special, 1.0])}, dtype="float16")
    got = store.get(FP, SETTINGS, content_hash("b"))["x"]
    assert got[1].item() == 1.0 and (got[0].isnan().item() if special != special else got[0].item() == special)


@pytest.mark.parametrize("kwargs, name", [({"meta": "abc"}, "meta"), ({"meta": [("id", 1)]}, "meta"),
                                          ({"meta": 5}, "meta"), ({"model_type": 5}, "model_type")])
def test_put_names_an_argument_of_the_wrong_type(tmp_path, kwargs, name):
    store = RepresentationStore(tmp_path / "s")
    with pytest.raises(TypeError, match=f"`{name}` must be"):
        store.put(FP, SETTINGS, content_hash("a"), {"x": torch.ones(2)}, **kwargs)
    assert len(store) == 0
