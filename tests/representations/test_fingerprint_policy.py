"""One fingerprint policy for every family (issue 32): the config fields that never change a representation (ids,
labels, dtype, output switches, initializer and generation settings) are ignored by all, and a family adds fields
only through its config class (`fingerprint_ignored_fields`, `fingerprint_ignored_prefixes`).

Stored representations written before the policy was unified are still read: the fingerprints are unchanged (the
config part of every family is byte-identical to its pre-issue-32 one for the families' configs, and the shipped
DeFormer's fingerprint is pinned). A representation stored under any other fingerprint is refused with
`RepresentationMismatchError` naming both fingerprints, never served."""

import copy
import importlib
import json
import sys

import pytest
import torch
import transformers

from hf_readonce.models.deformer_bert import modeling_deformer_bert
from hf_readonce.representations import registered_families
from hf_readonce.store import RepresentationMismatchError, RepresentationStore
from tests.conftest import run_without_hf_readonce

COMMON = modeling_deformer_bert._FINGERPRINT_IGNORED_FIELDS
SHIPPED_FINGERPRINT = "f62ab3f01f784c2648326813a0ca6fd453dc732e11e3bf240ddd0c5ce4109ac1"


def fingerprinted_families() -> dict:
    """family name -> (tiny model from its test cases, its modeling module, its config class)."""
    found = {}
    for spec in registered_families().values():
        cases = importlib.import_module(f"tests.models.{spec.name}.cases").CASES
        model = cases[0].build()
        if hasattr(model, "representation_fingerprint"):
            module = sys.modules[spec.auto_models[spec.auto_class][0].__module__]
            found[spec.name] = (model, module, spec.configs[0])
    return found


FIVE = {"deformer_bert", "readtwice_bert", "readonce_bart", "longdoc_bart", "block_attention_llama"}


def changed(value, field):
    """Another value of the same kind (a new value where the field is absent)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, dict):
        return {**value, 99: "other"} if field in ("id2label",) else {**value, "other": 99}
    if isinstance(value, (list, tuple)):
        return [*value, "Other"]
    return 7


def set_field(config, field, value):
    try:
        setattr(config, field, value)
    except Exception:  # a validating setter: the raw attribute is what `to_dict` reads
        config.__dict__[field] = value


def test_every_family_carries_the_one_policy():
    families = fingerprinted_families()
    assert FIVE <= set(families), sorted(families)
    for name, (_, module, _) in families.items():
        assert module._FINGERPRINT_IGNORED_FIELDS == COMMON, name
        assert module._config_fingerprint.__code__.co_code == modeling_deformer_bert._config_fingerprint.__code__.co_code


def test_common_fields_change_no_familys_fingerprint():
    unchanged = {}
    for name, (model, _, _) in fingerprinted_families().items():
        config = model.config
        base = model.representation_fingerprint()
        kept, effective = set(), set()
        for field in sorted(COMMON):
            before_dict, before = config.to_dict(), model.representation_fingerprint()
            saved = dict(config.__dict__)
            set_field(config, field, changed(before_dict.get(field), field))
            try:
                after_dict = config.to_dict()
            except Exception:  # a value `to_dict` cannot serialize: not a configuration anyone saves
                config.__dict__.clear()
                config.__dict__.update(saved)
                continue
            if after_dict != before_dict:
                effective.add(field)
                if model.representation_fingerprint() == before:
                    kept.add(field)
            config.__dict__.clear()
            config.__dict__.update(saved)
        assert len(effective) >= len(COMMON) - 4, (name, sorted(COMMON - effective))
        assert kept == effective, (name, sorted(effective - kept))
        unchanged[name] = kept
        # the test can fail: a field that is not ignored changes the fingerprint
        assert model.representation_fingerprint() == base
        config.some_new_field = 1
        assert model.representation_fingerprint() != base
        del config.some_new_field
        assert model.representation_fingerprint() == base
    assert len({frozenset(fields) for fields in unchanged.values()}) == 1, unchanged  # all families agree


def test_a_family_adds_ignored_fields_through_its_config_only():
    families = fingerprinted_families()
    own = {name: (set(getattr(cls, "fingerprint_ignored_fields", ())),
                  tuple(getattr(cls, "fingerprint_ignored_prefixes", ()))) for name, (_, _, cls) in families.items()}
    assert own["deformer_bert"][0] >= {"kd_loss_weight", "max_passage_length"}
    assert own["readonce_bart"] == ({"fusion", "append_layer", "max_document_length"}, ("decoder_",))
    for name, (model, _, _) in families.items():
        before = model.representation_fingerprint()
        for field in own[name][0]:
            set_field(model.config, field, changed(model.config.to_dict().get(field), field))
        for prefix in own[name][1]:
            model.config.__dict__[prefix + "new_field"] = 3
        assert model.representation_fingerprint() == before, name
        # another family's own field is part of this family's fingerprint
        foreign = next(f for other, (fields, _) in own.items() if other != name for f in sorted(fields)
                       if f not in own[name][0] and f not in model.config.to_dict())
        model.config.__dict__[foreign] = 1
        assert model.representation_fingerprint() != before, (name, foreign)
        del model.config.__dict__[foreign]


# The ignored fields of each family before issue 32 (drifted lists, one per modeling file), and its prefix rule.
_OLD_COMMON = {
    "transformers_version", "architectures", "_name_or_path", "auto_map", "id2label", "label2id", "num_labels",
    "problem_type", "finetuning_task", "task_specific_params", "dtype", "torch_dtype", "use_cache",
    "output_hidden_states", "output_attentions", "return_dict", "torchscript", "tokenizer_class", "prefix",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id",
    "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id", "initializer_range", "init_std",
    "initializer_factor", "tie_word_embeddings",
}
OLD_POLICY = {
    "deformer_bert": (_OLD_COMMON | {"classifier_dropout", "distillation_temperature", "kd_loss_weight",
                                     "lrs_loss_weight", "max_question_length", "max_passage_length", "doc_stride",
                                     "allow_no_answer", "null_score_diff_threshold"}, None),
    "readtwice_bert": (_OLD_COMMON | {"classifier_dropout", "coref_loss_weight"}, None),
    "readonce_bart": (_OLD_COMMON | {"classifier_dropout", "fusion", "append_layer"}, "decoder_"),
    "longdoc_bart": (_OLD_COMMON | {"classifier_dropout", "max_length", "min_length", "num_beams",
                                    "no_repeat_ngram_size", "early_stopping", "length_penalty"}, "decoder_"),
    "block_attention_llama": (_OLD_COMMON | {"model_type", "chunk_size_feed_forward", "is_encoder_decoder"}, None),
}


# Fields added to a config class since, that configs written before do not hold (a config saved then loads them at
# their default): the old code never saw them. `max_question_length` (the recorded question length of the QA
# families) is ignored by every family; DeFormer declared and ignored it already.
_ADDED_SINCE = {"readonce_bart": {"max_document_length": None, "max_question_length": None},
                "longdoc_bart": {"max_document_length": None}, "readtwice_bert": {"max_question_length": None}}


def as_written_before(config, family):
    """`config` as a checkpoint written before the fields added since: they load at their default."""
    config = copy.deepcopy(config)
    for field, default in _ADDED_SINCE.get(family, {}).items():
        setattr(config, field, default)
    return config


def old_config_fingerprint(config, family):
    ignored, prefix = OLD_POLICY[family]
    added = _ADDED_SINCE.get(family, {})
    fields = {k: v for k, v in config.to_dict().items() if k not in ignored and not (prefix and k.startswith(prefix))
              and not (k in added and v == added[k])}
    return json.dumps({"transformers": transformers.__version__.split(".")[0], "config": fields}, sort_keys=True,
                      default=str)


@pytest.mark.parametrize("family", sorted(OLD_POLICY))
def test_fingerprints_are_those_stores_were_written_with(family):
    """The config part of the fingerprint is byte-identical to the pre-issue-32 one for the family's default config
    and its test model's (the weights part is the same code), so stored representations are still found."""
    model, module, config_class = fingerprinted_families()[family]
    for config in (config_class(), as_written_before(model.config, family)):
        assert module._config_fingerprint(config, config_class) == old_config_fingerprint(config, family)


def test_a_readtwice_config_that_set_max_question_length_by_hand_gets_a_new_fingerprint():
    """The one fingerprint `max_question_length` changed: ReadTwice did not declare it before, so a config that set it
    by hand (no hf-readonce script wrote it for ReadTwice) counted it; every family now ignores it. Stores written with
    such a config are refused naming both fingerprints (test above), never served; configs without it are unchanged."""
    model, module, config_class = fingerprinted_families()["readtwice_bert"]
    assert model.config.max_question_length is not None
    assert module._config_fingerprint(model.config, config_class) != old_config_fingerprint(model.config,
                                                                                               "readtwice_bert")
    assert module._config_fingerprint(model.config, config_class) == module._config_fingerprint(
        as_written_before(model.config, "readtwice_bert"), config_class)


def test_the_shipped_deformer_keeps_its_fingerprint():
    from hf_readonce import DeformerBertForQuestionAnswering
    from hf_readonce.weights import reference_deformer_path

    try:
        path = reference_deformer_path()
    except FileNotFoundError:
        pytest.skip("the reference checkpoint is not available")
    model = DeformerBertForQuestionAnswering.from_pretrained(path)
    assert old_config_fingerprint(model.config, "deformer_bert") == modeling_deformer_bert._config_fingerprint(
        model.config, type(model.config))
    # computed with the code before issue 32 (transformers 5.x): stores written with it are still read
    assert model.representation_fingerprint() == SHIPPED_FINGERPRINT
    # and by the checkpoint's own code files (what a Hub user runs with `trust_remote_code=True`)
    result = run_without_hf_readonce(f"""
        from transformers import AutoModelForQuestionAnswering
        model = AutoModelForQuestionAnswering.from_pretrained({str(path)!r}, trust_remote_code=True)
        print(type(model).__module__, model.representation_fingerprint())
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    module, fingerprint = result.stdout.split()[-2:]
    assert module.startswith("transformers_modules.") and fingerprint == SHIPPED_FINGERPRINT


def test_representations_of_another_fingerprint_are_refused_naming_both(tmp_path):
    store = RepresentationStore(tmp_path / "store")
    settings = {"representation": "test/v1"}
    old, new = "a" * 64, "b" * 64
    store.put(old, settings, "c" * 64, {"hidden_states": torch.zeros(2, 4)})
    with pytest.raises(RepresentationMismatchError) as error:
        store.get(new, settings, "c" * 64)
    assert f"fingerprint {old[:16]}" in str(error.value) and f"fingerprint {new[:16]}" in str(error.value)


QA_FAMILIES = ("deformer_bert", "readtwice_bert", "readonce_bart")


@pytest.mark.parametrize("family", QA_FAMILIES)
def test_the_recorded_question_length_keeps_the_fingerprint(family, tmp_path):
    """Each QA family records the question length it was trained with under one name, `max_question_length`, a
    declared field of its config, ignored by every family's fingerprint (no stored representation holds a question):
    a checkpoint written before it was recorded (its `config.json` without the field) and the same checkpoint
    recording it have one fingerprint, so the representations stored with either are read with the other."""
    model, _, config_class = fingerprinted_families()[family]
    assert "max_question_length" in COMMON and "max_question_length" in config_class().to_dict()
    assert "max_question_length" not in getattr(config_class, "fingerprint_ignored_fields", ())  # one place
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())

    def load(**fields):
        written = {key: value for key, value in saved.items() if key != "max_question_length"}
        (tmp_path / "config.json").write_text(json.dumps({**written, **fields}))
        return type(model).from_pretrained(tmp_path).eval()

    before = load()
    assert before.config.max_question_length is None
    recorded = load(max_question_length=48)
    assert recorded.config.max_question_length == 48
    assert recorded.representation_fingerprint() == before.representation_fingerprint()
    # the test can fail: a field no policy ignores changes it
    assert load(max_question_length=48, some_new_field=1).representation_fingerprint() != \
        before.representation_fingerprint()
    with pytest.raises(ValueError, match="max_question_length"):
        config_class(max_question_length=0)


# The families whose fingerprint hashed no dtype at first (`hash_dtypes=False`): (their tag, the part hashed).
_UNTYPED = {"longdoc_bart": ("longdoc_bart_encoder|", lambda model: model.get_encoder()),
            "readonce_bart": ("readonce_bart|", lambda model: model.document_encoder)}


def fingerprint_before_compute_dtypes(model, family) -> str:
    """The fingerprint the code before compute dtypes were keyed gave `model` (LongDoc, ReadOnce): the same
    weights part, with no dtype of any parameter."""
    _, module, config_class = fingerprinted_families()[family]
    tag, part = _UNTYPED[family]
    owner = type("Owner", (), {"_fingerprint_cache": None})()
    return module._weights_fingerprint(owner, tag, module._config_fingerprint(model.config, config_class),
                                       list(part(model).named_parameters()), hash_dtypes=False)


def _tiny(family):
    from transformers import AutoTokenizer

    from hf_readonce.weights import minilm_path
    from tests.tasks.test_summarization_store import longdoc, readonce

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    return {"longdoc_bart": longdoc, "readonce_bart": readonce}[family](tokenizer), tokenizer


@pytest.mark.parametrize("family", sorted(_UNTYPED))
def test_the_bart_families_key_each_compute_dtype_and_keep_the_float32_key(family):
    """LongDoc and ReadOnce hashed no dtype, so a float16 checkpoint computing in float32 (a CPU) and in float16
    (CUDA, or `--compute-dtype float16`) had one fingerprint: states of two compute dtypes in one space. Now every
    parameter that is not float32 adds its dtype: float32 keeps the fingerprint stores were written with, float16 and
    bfloat16 each have their own."""
    model, _ = _tiny(family)
    half = copy.deepcopy(model).half()  # a float16 checkpoint computing in float16
    from_half = copy.deepcopy(half).float()  # the same checkpoint computing in float32 (`auto` on a CPU)
    bf16 = copy.deepcopy(from_half).to(torch.bfloat16)
    assert from_half.representation_fingerprint() == fingerprint_before_compute_dtypes(from_half, family)
    assert model.representation_fingerprint() == fingerprint_before_compute_dtypes(model, family)
    # the old code gave float16 compute the float32 key
    assert fingerprint_before_compute_dtypes(half, family) == from_half.representation_fingerprint()
    prints = {m.representation_fingerprint() for m in (half, from_half, bf16)}
    assert len(prints) == 3
    # one parameter in another dtype is another fingerprint too
    mixed = copy.deepcopy(from_half)
    next(_UNTYPED[family][1](mixed).parameters()).data = next(_UNTYPED[family][1](half).parameters()).data.clone()
    assert mixed.representation_fingerprint() not in prints | {fingerprint_before_compute_dtypes(model, family)}


@pytest.mark.parametrize("family", sorted(_UNTYPED))
def test_bart_stores_written_before_compute_dtypes_were_keyed(family, tmp_path):
    """A store written before: float32 compute's states are read (same key); float16 compute's states of a float32
    checkpoint (the old key of its fp16-rounded weights) are refused naming both fingerprints, never served to the
    same checkpoint computing in float16."""
    from hf_readonce.representations import fill_store, get_adapter
    from hf_readonce.representations.base import current_fingerprint
    from hf_readonce.store import content_hash

    model, tokenizer = _tiny(family)
    documents = ["Paris is the capital of France.", "Berlin is the capital of Germany."]
    hashes = [content_hash(text) for text in documents]
    fresh = RepresentationStore(tmp_path / "fresh")
    for compute in (model, copy.deepcopy(model).half()):
        fill_store(get_adapter(compute, tokenizer), fresh, documents)
    for compute in (model, copy.deepcopy(model).half()):
        adapter = get_adapter(compute, tokenizer)
        old = fingerprint_before_compute_dtypes(compute, family)
        store = RepresentationStore(tmp_path / f"old_{compute.dtype}".replace("torch.", ""))
        for doc_hash in hashes:  # as the code before wrote them
            store.put(old, adapter.settings(), doc_hash, fresh.get(current_fingerprint(adapter), adapter.settings(),
                                                                   doc_hash), model_type=family)
        if compute.dtype == torch.float32:
            assert old == current_fingerprint(adapter) and len(store.get_many(old, adapter.settings(), hashes)) == 2
            assert fill_store(adapter, store, documents).already_stored == 2
            continue
        new = current_fingerprint(adapter)
        assert new != old
        with pytest.raises(RepresentationMismatchError) as error:
            store.get_many(new, adapter.settings(), hashes)
        assert f"fingerprint {old[:16]}" in str(error.value) and f"fingerprint {new[:16]}" in str(error.value)
        stats = fill_store(adapter, store, documents)  # encoded again under its own key, the old space untouched
        assert stats.encoded == 2 and stats.already_stored == 0 and len(store.spaces()) == 2
