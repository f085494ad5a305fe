"""Finding the space of a store a model reads (`representations.spaces`): one lookup for every store-reading task.
A tiny random DeFormer (k=2) with the real MiniLM tokenizer; the store holds real Disfl-QA passages."""

import pytest

from hf_readonce import DeformerBertConfig, DeformerBertForQuestionAnswering
from hf_readonce.representations import DeformerBertAdapter, fill_store
from hf_readonce.representations.base import current_fingerprint
from hf_readonce.representations.spaces import adapter_class_of, adapter_for_store, find_space
from hf_readonce.store import MissingRepresentationError, RepresentationMismatchError, RepresentationStore
from hf_readonce.tasks.question_answering_store import find_deformer_space
from tests.conftest import tiny_model


def _settings(adapter):
    return type(adapter), current_fingerprint(adapter), adapter.settings()


def test_find_space_free_and_given_settings(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    texts = [r["context"] for r in qa_rows[:2]]
    store = RepresentationStore(tmp_path / "store")
    a = DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8)
    b = DeformerBertAdapter(model, tokenizer, max_passage_length=48, doc_stride=8)
    assert find_space(store, *_settings(a)) is None  # empty store
    fill_store(a, store, texts)
    # the window is the family's own setting: free unless given
    assert find_space(store, *_settings(b))["max_passage_length"] == 32
    assert find_space(store, *_settings(b), given=["max_passage_length"]) is None
    assert find_space(store, *_settings(a), given=["max_passage_length", "doc_stride"]) == a.settings()
    fill_store(b, store, texts)
    # two spaces of this model: `prefer` (the model's defaults) picks one; without it, or when it picks none, the
    # choice is named
    assert find_space(store, *_settings(a), prefer=a.settings()) == a.settings()
    assert find_space(store, *_settings(a), prefer={"max_passage_length": 48}) == b.settings()
    for prefer in (None, {"max_passage_length": 64}):
        with pytest.raises(ValueError, match=r"several settings \(max_passage_length=\d+, doc_stride=8; "
                                             r"max_passage_length=\d+, doc_stride=8\).*`--max-passage-length`"):
            find_space(store, *_settings(a), prefer=prefer)
    assert find_space(store, *_settings(b), given=["max_passage_length"])["max_passage_length"] == 48
    with pytest.raises(ValueError, match=r"`given` \['k'\] are not settings of deformer_bert"):
        find_space(store, *_settings(a), given=["k"])
    # other weights: both fingerprints named
    other = DeformerBertAdapter(tiny_model(seed=1), tokenizer, max_passage_length=32, doc_stride=8)
    with pytest.raises(RepresentationMismatchError, match="only for model fingerprint.*not for this model's"):
        find_space(store, *_settings(other), given=["max_passage_length"])


def test_adapter_for_store_reads_the_stored_settings(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    model.config.max_passage_length, model.config.doc_stride = 24, 0  # what get_adapter builds by default
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(MissingRepresentationError, match="holds no deformer_bert representations"):
        adapter_for_store(model, tokenizer, store)
    assert adapter_for_store(model, tokenizer, store, encode_missing=True).settings()["max_passage_length"] == 24
    fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8), store,
               [qa_rows[0]["context"]])
    assert adapter_for_store(model, tokenizer, store).settings()["max_passage_length"] == 32  # the store's, not 24
    with pytest.raises(ValueError, match=r"`settings` \['k'\] are not settings"):
        adapter_for_store(model, tokenizer, store, settings={"k": 1})
    with pytest.raises(TypeError, match="transformers model"):
        adapter_class_of(object())


def test_find_deformer_space_names_the_other_k(tmp_path, tokenizer, qa_rows):
    model = tiny_model()
    store = RepresentationStore(tmp_path / "store")
    with pytest.raises(MissingRepresentationError, match="it is empty"):
        find_deformer_space(store, model, tokenizer)
    fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8), store,
               [qa_rows[0]["context"]])
    assert find_deformer_space(store, model, tokenizer)["doc_stride"] == 8
    k3 = DeformerBertForQuestionAnswering(DeformerBertConfig(**{**model.config.to_dict(), "num_decomposed_layers": 3}))
    k3.load_state_dict(model.state_dict())
    # none of this model (its k) and what it holds instead, without "none for this tokenizer" before "this tokenizer's"
    with pytest.raises(MissingRepresentationError, match=r"holds no DeFormer passage states of this model and "
                                                         r"tokenizer \(num_decomposed_layers=3\); it holds this "
                                                         r"tokenizer's DeFormer states with num_decomposed_layers=2, "
                                                         r"max_passage_length=32, doc_stride=8 \(another fingerprint: "
                                                         r"other weights, k or compute dtype\); `--num-decomposed"):
        find_deformer_space(store, k3, tokenizer)
    with pytest.raises(MissingRepresentationError, match=r"\(num_decomposed_layers=2, max_passage_length=48\); it "
                                                         r"holds this tokenizer's DeFormer states with "
                                                         r"num_decomposed_layers=2, max_passage_length=32, doc_stride=8 "
                                                         r"\(this model's\)"):
        find_deformer_space(store, model, tokenizer, max_passage_length=48)  # other windows: named


def test_a_default_that_does_not_fit_the_model_is_not_needed_to_find_its_space(tmp_path, tokenizer, qa_rows):
    """A DeFormer with 128 positions and no recorded window: the family default (256) does not fit, yet the store's
    32-token space is found and read (the window is free)."""
    model = tiny_model()
    store = RepresentationStore(tmp_path / "store")
    fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=32, doc_stride=8), store,
               [qa_rows[0]["context"]])
    assert adapter_for_store(model, tokenizer, store).settings()["max_passage_length"] == 32


def test_document_caches_read_with_special_tokens_are_found(tmp_path, tokenizer, qa_rows):
    """How a document's tokens were read (`add_special_tokens`) is the encoder's choice, read back from the space."""
    import torch

    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
    from hf_readonce.representations import BlockAttentionLlamaAdapter
    from hf_readonce.tasks.document_cache_qa import find_document_cache_space

    torch.manual_seed(0)
    llama = BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)).eval()
    store = RepresentationStore(tmp_path / "store")
    fill_store(BlockAttentionLlamaAdapter(llama, tokenizer, add_special_tokens=True), store, [qa_rows[0]["context"]])
    assert find_document_cache_space(store, llama, tokenizer)["add_special_tokens"] is True
    fill_store(BlockAttentionLlamaAdapter(llama, tokenizer), store, [qa_rows[0]["context"]])
    assert find_document_cache_space(store, llama, tokenizer)["add_special_tokens"] is False  # both: the default's


def test_document_cache_space_is_looked_up_in_one_listing_of_the_store(tmp_path, tokenizer, qa_rows, monkeypatch):
    """Caches read with special tokens only, only another model's caches, or none: the lookup reads the store's
    index once (one refresh, one listing of its spaces) where it tries the default's space first, then either."""
    import torch

    from hf_readonce import BlockAttentionLlamaConfig, BlockAttentionLlamaForCausalLM
    from hf_readonce.representations import BlockAttentionLlamaAdapter
    from hf_readonce.tasks.document_cache_qa import find_document_cache_space

    def llama(seed):
        torch.manual_seed(seed)
        return BlockAttentionLlamaForCausalLM(BlockAttentionLlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0)).eval()

    model, text = llama(0), qa_rows[0]["context"]
    special, other, empty = (RepresentationStore(tmp_path / name) for name in ("special", "other", "empty"))
    fill_store(BlockAttentionLlamaAdapter(model, tokenizer, add_special_tokens=True), special, [text])
    fill_store(BlockAttentionLlamaAdapter(llama(1), tokenizer), other, [text])
    looks = []
    for name in ("refresh", "spaces"):
        method = getattr(RepresentationStore, name)
        monkeypatch.setattr(RepresentationStore, name,
                            lambda self, method=method, name=name: looks.append(name) or method(self))
    assert find_document_cache_space(special, model, tokenizer)["add_special_tokens"] is True
    assert looks == ["refresh", "spaces"]
    for store, error in ((other, RepresentationMismatchError), (empty, MissingRepresentationError)):
        looks.clear()
        with pytest.raises(error):
            find_document_cache_space(store, model, tokenizer)
        assert looks == ["refresh", "spaces"]


def test_several_spaces_the_recorded_windows_are_read_else_the_choice_is_named(tmp_path, tokenizer, qa_rows):
    """Two DeFormer spaces of one model (windows 32 and 48): the store-reading lookups read the one with the windows
    the checkpoint records (its defaults); where the defaults do not fit the model, or no space has them, they pick
    none and name the choice (not the first space listed)."""
    from hf_readonce.representations.spaces import default_settings

    model = tiny_model()  # 128 positions
    texts = [r["context"] for r in qa_rows[:2]]
    store = RepresentationStore(tmp_path / "store")
    for length in (32, 48):
        fill_store(DeformerBertAdapter(model, tokenizer, max_passage_length=length, doc_stride=8), store, texts)
    model.config.max_passage_length, model.config.doc_stride = 48, 8  # what the checkpoint records
    assert default_settings(model, tokenizer)["max_passage_length"] == 48
    assert find_deformer_space(store, model, tokenizer)["max_passage_length"] == 48
    assert adapter_for_store(model, tokenizer, store).settings()["max_passage_length"] == 48
    for recorded in (64, 500):  # a default no space has; a default the model's positions cannot hold
        model.config.max_passage_length = recorded
        assert (default_settings(model, tokenizer) is None) == (recorded == 500)
        with pytest.raises(ValueError, match="several settings"):
            adapter_for_store(model, tokenizer, store)
        with pytest.raises(ValueError, match="several settings"):
            find_deformer_space(store, model, tokenizer)
