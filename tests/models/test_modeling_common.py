"""The behaviours transformers users expect of every model class, checked on every head class of every registered
family: saving and loading, initialization of what a base checkpoint lacks, attention implementations, the
hidden-state and attention outputs, gradient checkpointing, token embeddings, tied weights, loading dtypes,
`device_map` placement, `can_generate` and `main_input_name`.

The families come from the registry (`registered_families()`, each spec's `auto_models`); each family's
`tests/models/<family>/cases.py` gives what differs between them: `common_config(model_type)` (a tiny config),
`common_base_class(model_class)` (the plain transformers class whose checkpoints it loads),
`common_inputs(model, seed)` (forward arguments, with labels where the class computes a loss) and
`common_output_lengths(config, model_class)` (output field -> number of tensors, as its docstring says; `None` where
the class refuses `output_hidden_states` and `output_attentions` with a `ValueError`).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import os

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from hf_readonce.representations import registered_families

# The Auto classes whose models generate text (`generate()`).
GENERATING_HEADS = {"AutoModelForCausalLM", "AutoModelForSeq2SeqLM"}
# Config entries that name where and with what a config was saved, not what it is.
PROVENANCE_KEYS = {"_name_or_path", "transformers_version"}
# A `*hidden_states` output field -> the output field its last tensor is (where the class returns that field).
LAST_HIDDEN_STATE = {"hidden_states": "last_hidden_state", "decoder_hidden_states": "last_hidden_state",
                     "encoder_hidden_states": "encoder_last_hidden_state"}
# (check, class name) -> why the class differs from the check: on purpose, or as the transformers class whose
# `forward` it runs.
INTENDED_DIFFERENCES = {
    ("test_config_return_dict_false_gives_the_tuple", "BlockAttentionLlamaForCausalLM"): "LlamaForCausalLM's own "
    "forward reads its `LlamaModel`'s output as a dataclass: with `config.return_dict=False` transformers' "
    "LlamaForCausalLM fails the same way (`return_dict=False` as an argument returns the tuple)",
    ("test_config_return_dict_false_gives_the_tuple", "LongDocBartModel"): "BartModel's own forward reads its "
    "encoder's output as a dataclass: with `config.return_dict=False` transformers' BartModel fails the same way "
    "(`return_dict=False` as an argument returns the tuple)",
    ("test_config_return_dict_false_gives_the_tuple", "LongDocBartForConditionalGeneration"): "BartModel's own "
    "forward reads its encoder's output as a dataclass: with `config.return_dict=False` transformers' "
    "BartForConditionalGeneration fails the same way (`return_dict=False` as an argument returns the tuple)",
}


def _classes():
    params = []
    for spec in registered_families().values():
        cases = importlib.import_module(f"tests.models.{spec.name}.cases")
        for head, classes in spec.auto_models.items():
            for model_class in classes:
                params.append(pytest.param(cases, model_class, head, id=model_class.__name__))
    return params


CLASSES = _classes()


@pytest.fixture(autouse=True)
def _skip_intended_differences(request):
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or "model_class" not in callspec.params:
        return
    name = request.node.originalname
    variants = [name] + [f"{name}[{part}]" for part in callspec.id.split("-")[1:]]  # e.g. "...[untied]"
    for variant in variants:
        reason = INTENDED_DIFFERENCES.get((variant, callspec.params["model_class"].__name__))
        if reason is not None:
            pytest.skip(reason)


def build(cases, model_class, seed=0, config=None):
    """A tiny `model_class` built from its family's common config with `seed`, in eval mode."""
    torch.manual_seed(seed)
    config = cases.common_config(model_class.config_class.model_type) if config is None else copy.deepcopy(config)
    return model_class(config).eval()


def tensors(output) -> list:
    """Every tensor of a model output (ModelOutput, tuple, nested), in order; other values (caches, ints) skipped."""
    if torch.is_tensor(output):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        return [tensor for item in output for tensor in tensors(item)]
    return []


def assert_same_outputs(got, expected, atol=0.0):
    got, expected = tensors(got), tensors(expected)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=0 if atol == 0 else 1e-4)


def run(model, cases, **extra):
    with torch.no_grad():
        return model(**cases.common_inputs(model), **extra)


def loss_of(output):
    """The class's loss where it computes one, else the mean square of its first output."""
    loss = getattr(output, "loss", None)
    return loss if loss is not None else tensors(output)[0].float().pow(2).mean()


def config_fields(config) -> dict:
    return {key: value for key, value in config.to_dict().items() if key not in PROVENANCE_KEYS}


def all_tensors(model) -> dict:
    """Name -> tensor of every parameter (tied ones under each of their names) and buffer."""
    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(model.named_buffers(remove_duplicate=False))
    return named


# ----------------------------------------------------------------------------------------------- save / load
@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_save_and_load_round_trip(cases, model_class, head, tmp_path):
    model = build(cases, model_class)
    expected = run(model, cases)
    model.save_pretrained(tmp_path / "first")
    assert (tmp_path / "first" / "model.safetensors").is_file()
    loaded = model_class.from_pretrained(tmp_path / "first").eval()
    assert type(loaded) is model_class
    assert config_fields(loaded.config) == config_fields(model.config)
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys()
    for name, value in state.items():
        assert loaded_state[name].dtype == value.dtype and torch.equal(loaded_state[name], value), name
    assert_same_outputs(run(loaded, cases), expected)

    loaded.save_pretrained(tmp_path / "second")
    first, second = (load_file(tmp_path / folder / "model.safetensors") for folder in ("first", "second"))
    assert first.keys() == second.keys()
    for name, value in first.items():
        assert second[name].dtype == value.dtype and second[name].shape == value.shape, name
        assert second[name].contiguous().view(torch.uint8).numpy().tobytes() == \
            value.contiguous().view(torch.uint8).numpy().tobytes(), name


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_what_a_base_checkpoint_lacks_is_initialized(cases, model_class, head, tmp_path):
    """A checkpoint of the plain transformers base model, loaded into a family class: what the checkpoint holds is
    loaded as saved, everything else is initialized by `_init_weights` (finite, the same for the same seed, equal to
    the class built from the config where that initialization does not draw random numbers)."""
    config = cases.common_config(model_class.config_class.model_type)
    base_class = cases.common_base_class(model_class)
    base_config = base_class.config_class(**{key: value for key, value in config.to_dict().items()
                                             if key not in ("model_type", "auto_map", "architectures")})
    torch.manual_seed(123)
    base = base_class(base_config).eval()
    base.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")

    def load(seed):
        torch.manual_seed(seed)
        model, info = model_class.from_pretrained(tmp_path, config=copy.deepcopy(config), output_loading_info=True)
        return all_tensors(model), set(info["missing_keys"])

    first, missing = load(0)
    again, _ = load(0)
    direct, direct_other = (all_tensors(build(cases, model_class, seed, config)) for seed in (0, 1))
    assert first.keys() == direct.keys()
    prefix = model_class.base_model_prefix
    for name, value in first.items():
        if value.is_floating_point():
            assert torch.isfinite(value).all(), f"{name} is not finite after loading"
        assert torch.equal(value, again[name]), f"{name} differs between two loads with the same seed"
        stored = saved.get(name, saved.get(name.removeprefix(f"{prefix}.")))
        if stored is not None and name not in missing:
            assert torch.equal(value, stored), f"{name} is not the checkpoint's"
        elif torch.equal(direct[name], direct_other[name]):  # an initialization that draws no random numbers
            assert torch.equal(value, direct[name]), f"{name} is not what `_init_weights` gives"


# The config fields that scale the random initialization of `_init_weights` (BERT, GPT-2, Llama: `initializer_range`;
# BART: `init_std`).
INITIALIZER_STD_FIELDS = ("initializer_range", "init_std")


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_every_parameter_is_initialized_from_the_config(cases, model_class, head):
    """Every parameter is set by `_init_weights`, not left as torch made it: with the config's initialization std at
    1e-10, each is either below 1e-6 everywhere (drawn with that std) or the same whatever the seed (a fixed value:
    zeros, ones, an identity), as transformers' `_config_zero_init` check."""
    config = cases.common_config(model_class.config_class.model_type)
    fields = [field for field in INITIALIZER_STD_FIELDS if hasattr(config, field)]
    assert fields, f"{type(config).__name__} has none of {INITIALIZER_STD_FIELDS}"
    for field in fields:
        setattr(config, field, 1e-10)
    first, second = (dict(build(cases, model_class, seed, config).named_parameters()) for seed in (0, 1))
    for name, value in first.items():
        fixed = torch.equal(value, second[name])
        assert fixed or value.abs().max() < 1e-6, \
            f"{name} is not initialized from the config (std {value.float().std().item():.3g})"


# ----------------------------------------------------------------------------------------------- attention
def _implementations_agree(cases, model_class, implementations, folder):
    build(cases, model_class).save_pretrained(folder)
    eager = model_class.from_pretrained(folder, attn_implementation="eager").eval()
    expected = run(eager, cases)
    for implementation in implementations:
        model = model_class.from_pretrained(folder, attn_implementation=implementation).eval()
        assert model.config._attn_implementation == implementation
        assert_same_outputs(run(model, cases), expected, atol=1e-5)


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_attention_implementations_agree(cases, model_class, head, tmp_path):
    """eager and SDPA give the same outputs; a class that says it cannot run SDPA, FlexAttention or flash attention
    refuses it (a `ValueError`, before any kernel is looked for)."""
    _implementations_agree(cases, model_class, ["sdpa"] * model_class._supports_sdpa, tmp_path)
    for implementation, flag in (("sdpa", "_supports_sdpa"), ("flex_attention", "_supports_flex_attn"),
                                 ("flash_attention_2", "_supports_flash_attn")):
        if not getattr(model_class, flag):
            with pytest.raises(ValueError, match=rf"{model_class.__name__} does not support"):  # transformers' own
                model_class.from_pretrained(tmp_path, attn_implementation=implementation)


@pytest.mark.skipif(os.environ.get("HF_READONCE_TEST_FLEX") != "1",
                    reason="FlexAttention on CPU compiles for minutes on this machine; set HF_READONCE_TEST_FLEX=1")
@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_flex_attention_agrees(cases, model_class, head, tmp_path):
    if not model_class._supports_flex_attn:
        pytest.skip(f"{model_class.__name__} does not support FlexAttention")
    _implementations_agree(cases, model_class, ["flex_attention"], tmp_path)


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_hidden_states_and_attentions(cases, model_class, head):
    model = build(cases, model_class)
    model.set_attn_implementation("eager")
    config = model.config
    lengths = cases.common_output_lengths(config, model_class)
    if lengths is None:  # the family documents that its classes refuse them
        for flag in ("output_hidden_states", "output_attentions"):
            with pytest.raises(ValueError, match=flag):
                run(model, cases, **{flag: True})
        return
    plain = run(model, cases)
    output = run(model, cases, output_hidden_states=True, output_attentions=True)
    for field, length in lengths.items():
        assert getattr(plain, field, None) is None, f"{field} returned without being asked for"
        values = getattr(output, field)
        assert isinstance(values, tuple) and len(values) == length, (field, type(values), len(values or ()))
        for value in values:
            if "hidden_states" in field:
                assert value.dim() == 3 and value.shape[-1] == config.hidden_size, (field, value.shape)
            else:
                assert value.dim() == 4 and value.shape[1] == config.num_attention_heads, (field, value.shape)
                sums = value.sum(-1)
                assert ((sums - 1).abs() < 1e-4).all(), f"{field}: rows are not softmaxed"
        assert len({value.shape[0] for value in values}) == 1, field
        for index, (before, after) in enumerate(zip(values, values[1:])):  # each layer's own, none recorded twice
            assert before.shape != after.shape or not torch.equal(before, after), f"{field}[{index}] repeated"
        last = LAST_HIDDEN_STATE.get(field)
        if last is not None and getattr(output, last, None) is not None:  # the last layer's output, as returned
            assert torch.equal(values[-1], getattr(output, last)), f"{field}[-1] is not {last}"
    as_tuple = run(model, cases, output_hidden_states=True, output_attentions=True, return_dict=False)
    assert isinstance(as_tuple, tuple)
    assert_same_outputs(as_tuple, output.to_tuple())


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_config_return_dict_false_gives_the_tuple(cases, model_class, head):
    """`config.return_dict=False` (as `torchscript=True` sets it) makes `forward` return the tuple of the output it
    returns by default, as `return_dict=False` does: the heads ask their base model for its dataclass."""
    model = build(cases, model_class)
    expected = run(model, cases)
    model.config.return_dict = False
    output = run(model, cases)
    assert isinstance(output, tuple), type(output)
    assert_same_outputs(output, expected.to_tuple())


# ----------------------------------------------------------------------------------------------- training
def repeated_layers(model) -> dict:
    """Name -> module of every repeated layer: the elements of a `ModuleList` of two or more blocks (modules with
    submodules of their own, not a list of single `Linear`s)."""
    return {f"{name}.{index}": layer for name, module in model.named_modules()
            if isinstance(module, nn.ModuleList) and len(module) > 1
            for index, layer in enumerate(module) if any(True for _ in layer.children())}


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_gradient_checkpointing_gives_the_same_gradients(cases, model_class, head):
    """The same loss and gradients with gradient checkpointing, and every repeated layer that ran is run again in
    the backward pass (it was checkpointed: its activations were not kept)."""
    if not model_class.supports_gradient_checkpointing:
        pytest.skip(f"{model_class.__name__} does not support gradient checkpointing")
    model = build(cases, model_class).train()
    inputs = cases.common_inputs(model)
    calls = {}  # (layer, sublayer) -> calls; a layer's forward is checkpointed, the hooks of what it calls replayed
    for name, layer in repeated_layers(model).items():
        for child_name, child in layer.named_children():
            key = (name, child_name)
            child.register_forward_pre_hook(lambda module, args, _key=key: calls.update({_key: calls.get(_key, 0) + 1}))

    def loss_and_gradients():
        model.zero_grad()
        calls.clear()
        loss = loss_of(model(**inputs))
        loss.backward()
        runs = {}
        for (layer, _), count in calls.items():
            runs[layer] = max(runs.get(layer, 0), count)
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}, runs

    loss, gradients, plain_calls = loss_and_gradients()
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    checkpointed_loss, checkpointed_gradients, checkpointed_calls = loss_and_gradients()
    assert plain_calls, f"{model_class.__name__}: no repeated layer ran"
    assert checkpointed_calls == {name: 2 * count for name, count in plain_calls.items()}, \
        "layers not run again in the backward pass were not checkpointed"
    torch.testing.assert_close(checkpointed_loss, loss, atol=1e-6, rtol=0)
    assert checkpointed_gradients.keys() == gradients.keys()
    for name, gradient in gradients.items():
        torch.testing.assert_close(checkpointed_gradients[name], gradient, atol=1e-6, rtol=1e-5, msg=name)


# ----------------------------------------------------------------------------------------------- embeddings
def _sharing(model, weight) -> set:
    return {name for name, p in model.named_parameters(remove_duplicate=False) if p.data_ptr() == weight.data_ptr()}


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_input_embeddings_get_and_set(cases, model_class, head):
    model = build(cases, model_class)
    embeddings = model.get_input_embeddings()
    config = model.config
    assert isinstance(embeddings, nn.Embedding) and embeddings.num_embeddings == config.vocab_size
    output_embeddings = model.get_output_embeddings()
    output_names = _sharing(model, output_embeddings.weight) if output_embeddings is not None else set()
    readers = _sharing(model, embeddings.weight) - output_names  # every copy the model reads the tokens with
    new = nn.Embedding(config.vocab_size, config.hidden_size)
    model.set_input_embeddings(new)
    assert model.get_input_embeddings() is new
    assert readers <= _sharing(model, new.weight), readers - _sharing(model, new.weight)
    run(model, cases)


@pytest.mark.parametrize("change", [7, -5], ids=["larger", "smaller"])
@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_resize_token_embeddings(cases, model_class, head, change):
    model = build(cases, model_class)
    vocab_size = model.config.vocab_size
    tied = bool(model_class._tied_weights_keys) and model.config.tie_word_embeddings
    readers = _sharing(model, model.get_input_embeddings().weight)
    size = vocab_size + change
    model.resize_token_embeddings(size)
    assert model.config.vocab_size == size
    embeddings = model.get_input_embeddings()
    assert embeddings.num_embeddings == size
    assert readers <= _sharing(model, embeddings.weight), readers - _sharing(model, embeddings.weight)
    output_embeddings = model.get_output_embeddings()
    if output_embeddings is not None:
        assert output_embeddings.weight.shape[0] == size
        if tied:
            assert output_embeddings.weight.data_ptr() == embeddings.weight.data_ptr()
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding):
            assert module.num_embeddings != vocab_size, f"{name} kept the old vocabulary"
    output = run(model, cases)
    logits = getattr(output, "logits", None)
    if logits is not None:
        assert logits.shape[-1] == size


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_tied_weights_after_loading(cases, model_class, head, tie, tmp_path):
    """With `tie_word_embeddings=True` every `_tied_weights_keys` entry is one parameter after loading and is saved
    once, and output embeddings (an LM head) are the input embeddings; with `False` the two are separate parameters,
    both saved and loaded."""
    config = cases.common_config(model_class.config_class.model_type)
    config.tie_word_embeddings = tie
    model = build(cases, model_class, config=config)
    if not model_class._tied_weights_keys:
        assert model.get_output_embeddings() is None, \
            f"{model_class.__name__} has output embeddings but no `_tied_weights_keys` to tie them with"
        pytest.skip(f"{model_class.__name__} ties no weights")
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    loaded = model_class.from_pretrained(tmp_path)
    assert loaded.config.tie_word_embeddings is tie
    output_embeddings = loaded.get_output_embeddings()
    if output_embeddings is not None:
        assert (output_embeddings.weight is loaded.get_input_embeddings().weight) is tie
    for target, source in model_class._tied_weights_keys.items():
        if tie:
            assert not (target in saved and source in saved), f"{target} is saved a second time as {source}"
            assert loaded.get_parameter(target) is loaded.get_parameter(source), (target, source)
        else:
            assert target in saved and source in saved, (target, source)
            assert loaded.get_parameter(target).data_ptr() != loaded.get_parameter(source).data_ptr()
            assert torch.equal(loaded.get_parameter(target), saved[target]), target


# ----------------------------------------------------------------------------------------------- dtypes
def _floating_dtypes(model) -> dict:
    kept = set(model._keep_in_fp32_modules or ()) | set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    return {name: p.dtype for name, p in model.named_parameters()
            if p.is_floating_point() and not any(part in kept for part in name.split("."))}


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_loading_in_bfloat16(cases, model_class, head, tmp_path):
    model = build(cases, model_class)
    model.save_pretrained(tmp_path / "float32")
    loaded = model_class.from_pretrained(tmp_path / "float32", dtype=torch.bfloat16).eval()
    assert set(_floating_dtypes(loaded).values()) == {torch.bfloat16}
    assert all(torch.isfinite(t.float()).all() for t in tensors(run(loaded, cases)) if t.is_floating_point())

    model.to(torch.bfloat16).save_pretrained(tmp_path / "bfloat16")
    auto = model_class.from_pretrained(tmp_path / "bfloat16", dtype="auto").eval()
    assert set(_floating_dtypes(auto).values()) == {torch.bfloat16}
    run(auto, cases)


# ----------------------------------------------------------------------------------------------- device map
def whole_modules(model) -> dict:
    """Name -> module of everything `device_map="auto"` must keep on one device: the repeated layers, and every
    module below the model that holds parameters of its own besides submodules (its forward combines them with its
    submodules' outputs, or a tied parameter lives in it)."""
    whole = repeated_layers(model)
    for name, module in model.named_modules():
        if name and any(True for _ in module.parameters(recurse=False)) and any(True for _ in module.children()):
            whole[name] = module
    return whole


@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_device_map_never_splits_a_layer(cases, model_class, head):
    from transformers.integrations.accelerate import infer_auto_device_map

    model = build(cases, model_class)
    assert repeated_layers(model), f"{model_class.__name__} has no repeated layers"
    whole = whole_modules(model)
    no_split = model._no_split_modules
    assert no_split, f"{model_class.__name__} has repeated layers but no `_no_split_modules`"
    missing = {type(module).__name__ for module in whole.values()} - set(no_split)
    assert not missing, f"modules of {sorted(missing)} may be split between devices"
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for share in range(1, 40):  # devices 0 and 1 hold 1/40 .. 39/40 of the model each, device 2 and the CPU the rest
        device_map = infer_auto_device_map(model, max_memory={0: total * share // 40, 1: total * share // 40,
                                                              2: total, "cpu": 4 * total},
                                           no_split_module_classes=no_split)
        for name in whole:
            devices = {device for key, device in device_map.items()
                       if key == "" or key == name or key.startswith(name + ".") or name.startswith(key + ".")}
            assert len(devices) == 1, (share, name, devices)


# ----------------------------------------------------------------------------------------------- generation
@pytest.mark.parametrize(("cases", "model_class", "head"), CLASSES)
def test_can_generate_and_main_input_name(cases, model_class, head):
    assert model_class.can_generate() == (head in GENERATING_HEADS)
    assert model_class.main_input_name == "input_ids"
    assert next(iter(list(inspect.signature(model_class.forward).parameters)[1:])) == model_class.main_input_name
