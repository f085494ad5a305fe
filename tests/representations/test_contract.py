"""The contract every representation adapter keeps: documents encoded into a store, read back with the adapter's
read side and fed to the model give the same logits (and generated tokens) as the model reading the documents
itself, to 1e-5 in fp32.

The test runs over every registered adapter, each with the harness its family keeps in
`tests/models/<family>/cases.py` (`contract_harness(tokenizer) -> (model, settings, check)`); a family registered
with an adapter and no harness fails `test_every_registered_adapter_has_a_contract_harness`.
"""

import importlib

import pytest
import torch

from hf_readonce.representations import fill_store, get_adapter, registered_adapters, registered_families
from hf_readonce.store import RepresentationStore, content_hash
from tests.representations.contract import DOCUMENTS, QUESTION  # noqa: F401  (DOCUMENTS: read by test_recompute)


def _harnesses() -> dict:
    """model type -> `contract_harness` of its family's test cases (None where the family has none: the test below
    then fails naming the file to write, instead of an import error at collection)."""
    found = {}
    for spec in registered_families().values():
        if spec.adapter is not None:
            try:
                cases = importlib.import_module(f"tests.models.{spec.name}.cases")
            except ModuleNotFoundError as error:  # the family's cases module itself, not an import inside it
                if error.name not in (f"tests.models.{spec.name}", f"tests.models.{spec.name}.cases"):
                    raise
                cases = None
            found[spec.adapter.model_type] = getattr(cases, "contract_harness", None)
    return found


HARNESSES = _harnesses()


def test_every_registered_adapter_has_a_contract_harness():
    assert set(registered_adapters()) == set(HARNESSES)
    missing = [model_type for model_type, harness in HARNESSES.items() if not callable(harness)]
    assert not missing, (f"families without a contract harness: {missing}; write tests/models/<family>/cases.py with "
                         "`contract_harness(tokenizer) -> (model, settings, check)` (docs/contributing.md)")


@pytest.mark.parametrize("model_type", sorted(registered_adapters()))
def test_store_round_trip_gives_the_models_own_outputs(model_type, tokenizer, tmp_path):
    model, settings, check = HARNESSES[model_type](tokenizer)
    adapter = get_adapter(model, tokenizer, **settings)
    assert type(adapter) is registered_adapters()[model_type]
    store = RepresentationStore(tmp_path / "store")
    stats = fill_store(adapter, store, DOCUMENTS, dtype="float32")
    assert stats.encoded == len(DOCUMENTS)
    reopened = RepresentationStore(tmp_path / "store", readonly=True)  # another process would see the same
    stored = reopened.get_many(adapter.fingerprint(), adapter.settings(), [content_hash(d) for d in DOCUMENTS])
    read = adapter.read(stored)
    # ReadTwice-BERT names its representation fingerprint `fingerprint()` (the model's own API)
    model_fingerprint = getattr(model, "representation_fingerprint", None) or model.fingerprint
    assert read.model_fingerprint == model_fingerprint() == adapter.fingerprint()
    with torch.no_grad():
        check(adapter, read)
