"""The family registry, modelled on peft's `register_peft_method(...)`: every model family declares itself once, on the
last line of its file in this folder, with [`register_family`]. Everything that serves several families iterates the
registry instead of naming them: transformers' Auto registration (`hf_readonce.register_models`), publishing
(`hf_readonce.hub.publish`), model cards (`hf_readonce.hub.cards`), the command line, the adapters of
[`hf_readonce.representations`] and the tests' family cases.

A family is one folder `hf_readonce/models/<name>/` (what travels to the Hub with a checkpoint) and one file
`hf_readonce/representations/<name>.py` (its adapter and its [`FamilySpec`]); nothing else has to change to add one.
A family of another installed package keeps both in that package and names the module that calls
[`register_family`] as an entry point of the group `hf_readonce.families`, which `import hf_readonce` loads
(`hf_readonce.representations.ENTRY_POINT_GROUP`).

The CLI, [`fill_store`] and the tasks find adapters here by `config.model_type` ([`get_adapter_class`],
[`get_adapter`]).
"""

from __future__ import annotations

import importlib
import inspect
import keyword
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

# what `hf-readonce answer` can do with a family's stored representations
ANSWER_KINDS = ("extractive", "generative")
# the attributes every adapter class provides (the [`RepresentationAdapter`] protocol)
ADAPTER_ATTRIBUTES = ("model_type", "representation", "checkpoint_model_types", "cli_settings", "load_model",
                      "fingerprint", "settings", "encode", "num_tokens", "read")


@dataclass(frozen=True)
class CardText:
    r"""What a model card says about one model type of a family (see [`hf_readonce.hub.cards.build_model_card`]).

    Attributes:
        tag (`str`): the method's Hub tag (e.g. `"deformer"`).
        title (`str`): the method's name, as the card's "Method" heading shows it.
        paper (`str`): the paper citation (authors, venue, year, title).
        paragraphs (`tuple[str, ...]`): the method summary, one Markdown paragraph each.
        pipeline_tag (`str`): the card's default `pipeline_tag` (e.g. `"question-answering"`).
        usage (`str`): the card's usage snippet (Markdown); `{repo_id}` is replaced by the repo id and `{trust}` by
            `, trust_remote_code=True` when the checkpoint carries its code (else by nothing).
        widget (`tuple[dict, ...]` or `None`, defaults to `()`): the card's inference examples, in the input format
            of `pipeline_tag`'s pipeline; empty: `hf_readonce.hub.cards.DEFAULT_WIDGETS[pipeline_tag]` where it has
            one, else none; `None`: no example (a pipeline that needs more than the task's inputs, such as a
            question and its document, cannot run a single-text widget).
    """

    tag: str
    title: str
    paper: str
    paragraphs: tuple[str, ...]
    pipeline_tag: str
    usage: str
    widget: tuple | None = ()

    def render_usage(self, repo_id: str, custom_code: bool = True) -> str:
        """The usage snippet for `repo_id`."""
        trust = ", trust_remote_code=True" if custom_code else ""
        return self.usage.replace("{repo_id}", repo_id).replace("{trust}", trust)


@dataclass(frozen=True)
class FamilySpec:
    r"""One model family, as [`register_family`] stores it (read-only).

    Attributes:
        name (`str`): the family's name, an identifier: its folder `hf_readonce/models/<name>/` (or `models/<name>/`
            of the package that registers it).
        configs (`tuple[type, ...]`): its config classes, one per model type (`config_class.model_type`).
        auto_models (`Mapping[str, tuple[type, ...]]`): transformers Auto class name (e.g. `"AutoModelForCausalLM"`)
            -> the model classes registered with it (at most one per model type).
        auto_class (`str`): the Auto class that loads a published checkpoint and that its pipelines run.
        pipelines (`Mapping[str, type]`): task -> pipeline class; their files travel with published checkpoints
            (`custom_pipelines`). Empty when transformers' own pipeline runs the model (causal LMs).
        adapter (`type`, *optional*): the representation adapter (`None`: the family stores no representations).
        cards (`Mapping[str, CardText]`): model card text per model type; may also describe checkpoint types the
            family loads (e.g. a plain `bert` teacher of a DeFormer).
        answer (`str`, *optional*): what `hf-readonce answer` does with the family's stored representations:
            `"extractive"` (spans), `"generative"` (generated answers), or `None` (not served).
        answer_function (`str`, *optional*): with `answer`, the function that answers from the stored
            representations, as `"module:name"` (imported when a command needs it, so a family's task module may
            import its adapter): `function(model, tokenizer, store, examples, **options) -> {id: answer}`. The CLI
            always passes, extractive, `max_question_length`, `batch_size`, `n_best_size`, `max_answer_length`,
            `encode_missing`, `progress`; generative, `batch_size`, `max_new_tokens`, `encode_missing`, `progress`,
            `timings`; and only where the signature takes them: extractive, the no-answer decision
            (`allow_no_answer` and `null_score_diff_threshold`, both, where it takes `allow_no_answer`); generative,
            `recompute_ratio`; both, `store_dtype`
            (the storage dtype of `--encode-missing`, given with `--store-dtype`; a function without it is refused
            that option), the family's
            representation settings by name (or all of them as `settings`), `settings_used` (a dict it fills
            with what it read, printed) and `counts` (a dict it fills with `passages` / `passages_cut`, the passages
            cut to `max_document_length`, and `questions` / `questions_cut`, the questions cut to the tokens it reads
            of one, [`AdapterBase.questions_cut`]; the CLI notes those cut). A function may carry
            `check_example(row)` (raising `ValueError`): the CLI sets aside the question lines it refuses, as it does
            rows without a question.
        summarize (`bool`, defaults to `False`): whether `hf-readonce summarize` (and
            [`hf_readonce.tasks.summarization_store.summarize_from_store`]) generates summaries from the family's
            stored representations; its adapter then provides `generation_inputs(read)`, the `generate()` arguments
            of what `read` returns.
        exports (`tuple[type, ...]`): further names `hf_readonce` re-exports (output classes, ...), besides the
            configs and model classes.
        lazy_exports (`Mapping[str, str]`): name -> module of names `hf_readonce` re-exports on first access only
            (e.g. a `Trainer` subclass, too heavy for `import hf_readonce`).
        module (`str`): the module that registered the family.
    """

    name: str
    configs: tuple
    auto_models: Mapping
    auto_class: str
    cards: Mapping
    pipelines: Mapping = field(default_factory=dict)
    adapter: type | None = None
    answer: str | None = None
    answer_function: str | None = None
    summarize: bool = False
    exports: tuple = ()
    lazy_exports: Mapping = field(default_factory=dict)
    module: str = ""

    @property
    def model_types(self) -> tuple[str, ...]:
        """The `config.model_type` of each config class."""
        return tuple(config.model_type for config in self.configs)

    def model_classes(self, model_type: str) -> dict[str, type]:
        """Auto class name -> model class, for one model type of the family."""
        return {head: cls for head, classes in self.auto_models.items() for cls in classes
                if cls.config_class.model_type == model_type}

    def exported(self) -> dict[str, object]:
        """Name -> object of everything `hf_readonce` re-exports for this family (configs, model classes, pipeline
        classes, `exports`)."""
        return _exported_objects(self.configs, self.auto_models, self.pipelines, self.exports)

    @property
    def checkpoint_model_types(self) -> tuple[str, ...]:
        """Model types whose checkpoints the family's adapter loads (its own first), e.g. `("deformer_bert",
        "bert")`; the family's model types when it has no adapter."""
        if self.adapter is None:
            return self.model_types
        return tuple(dict.fromkeys((*self.model_types, *self.adapter.checkpoint_model_types)))


class FamilyEntryPointWarning(UserWarning):
    """Warned once per process for each `hf_readonce.families` entry point of an installed package whose module fails
    to import or whose family [`register_family`] refuses: hf-readonce and the other families load without it (a
    checkpoint of its family is then unknown, and the commands say why), and [`family_entry_point_failures`] lists
    it."""


# entry point name -> why it failed (the process's failures of `hf_readonce.representations.load_family_entry_points`)
_ENTRY_POINT_FAILURES: dict[str, str] = {}


def family_entry_point_failures() -> dict[str, str]:
    """A copy of the `hf_readonce.families` entry points that failed in this process: entry point name -> one line
    naming its module, its package and the error (what [`FamilyEntryPointWarning`] said); empty when all loaded."""
    return dict(_ENTRY_POINT_FAILURES)



def entry_point_failures_note() -> str:
    """`"; these family entry points failed to load: 'name' (reason); ..."`, naming the `hf_readonce.families` entry
    points that failed in this process ([`family_entry_point_failures`]), to end an error line about a model type no
    installed family knows (it may be theirs); `""` when none failed."""
    failed = family_entry_point_failures()
    if not failed:
        return ""
    return "; these family entry points failed to load: " + "; ".join(f"{name!r} ({reason})"
                                                                     for name, reason in failed.items())

def _exported_objects(configs, auto_models: Mapping, pipelines: Mapping, exports) -> dict[str, object]:
    """Name -> object of a family's configs, model classes, pipeline classes and `exports` ([`FamilySpec.exported`])."""
    objects = [*configs, *(cls for classes in auto_models.values() for cls in classes), *pipelines.values(), *exports]
    return {obj.__name__: obj for obj in objects}


_FAMILIES: dict[str, FamilySpec] = {}
_ADAPTERS: dict[str, type] = {}
# called with each FamilySpec registered from then on (`hf_readonce.register_models` re-exports its names at once)
_on_register: list = []


def _fail(name, field_name: str, message: str):
    raise ValueError(f"family {name!r}: `{field_name}` {message}")


def _classes(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _check_class(name, field_name: str, value, base: type, what: str) -> None:
    if value is None:
        _fail(name, field_name, f"is missing (None): give the {what} class.")
    if not isinstance(value, type) or not issubclass(value, base):
        _fail(name, field_name, f"must be a {what} class (a subclass of {base.__module__}.{base.__name__}), got "
                                f"{value!r}.")


def register_family(*, name: str, configs: Sequence[type], auto_models: Mapping[str, type | Sequence[type]],
                    auto_class: str, cards: Mapping[str, CardText], pipelines: Mapping[str, type] | None = None,
                    adapter: type | None = None, answer: str | None = None, answer_function: str | None = None,
                    summarize: bool = False,
                    exports: Sequence = (), lazy_exports: Mapping[str, str] | None = None) -> FamilySpec:
    r"""Declare a model family (call it on the last line of `hf_readonce/representations/<name>.py`, or of the module
    another package names as its `hf_readonce.families` entry point), check it and register its configs and model
    classes with transformers' Auto classes (`AutoConfig.register`, `AutoModel*.register`).

    Example:

    ```python
    # hf_readonce/representations/my_bert.py, after its adapter MyBertAdapter
    register_family(name="my_bert", configs=(MyBertConfig,), auto_models={"AutoModelForQuestionAnswering": MyBertForQA},
                    auto_class="AutoModelForQuestionAnswering", pipelines={"question-answering": MyQAPipeline},
                    adapter=MyBertAdapter, cards={"my_bert": CardText(tag="my-method", title="My method", ...)})
    ```

    Args:
        name (`str`): the family's name, an identifier (its folder under `models/`).
        configs (`Sequence[type]`): its `PretrainedConfig` subclasses, one per model type.
        auto_models (`Mapping[str, type | Sequence[type]]`): Auto class name -> model class(es); each model class's
            `config_class` must be one of `configs`, and a class that called `register_for_auto_class` must be
            registered under that same Auto class.
        auto_class (`str`): the Auto class (a key of `auto_models`) that loads a published checkpoint; every model
            type needs a model class under it.
        cards (`Mapping[str, CardText]`): model card text; one entry per model type at least.
        pipelines (`Mapping[str, type]`, *optional*): task -> `transformers.Pipeline` subclass.
        adapter (`type`, *optional*): the representation adapter class ([`RepresentationAdapter`]); its
            `model_type` must be one of the family's.
        answer (`str`, *optional*): `"extractive"` or `"generative"` (needs an adapter).
        answer_function (`str`, *optional*): `"module:name"` of the answering function (required with `answer`;
            see [`FamilySpec`]).
        summarize (`bool`, defaults to `False`): `hf-readonce summarize` serves the family (needs an adapter with a
            `generation_inputs` method).
        exports (`Sequence`), lazy_exports (`Mapping[str, str]`): see [`FamilySpec`].

    Returns:
        [`FamilySpec`].

    Raises:
        ValueError: naming the family and the field: a missing (None) or wrong class, a model type registered twice
            (in this family, by another family, or by transformers itself), a model class whose config is not the
            family's, an adapter for a model type the family does not have, a model type without card text, an
            unknown Auto class or answer kind, an answering family without `answer_function` (or one that is not
            `"module:name"`), `summarize` that is not a bool or lacks an adapter with
            `generation_inputs`, a family name already registered by another module, or a name `hf_readonce` would
            re-export (a config, model or pipeline class, `exports`, `lazy_exports`) that another family exports as
            another object.
    """
    import transformers
    from transformers import PretrainedConfig, PreTrainedModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.pipelines import Pipeline

    caller = inspect.currentframe().f_back
    module = caller.f_globals.get("__name__", "") if caller is not None else ""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"family {name!r}: `name` must be an identifier (the family's folder name under models/).")
    known = _FAMILIES.get(name)
    if known is not None and known.module != module:
        _fail(name, "name", f"is already registered by {known.module}.")

    configs = _classes(configs)
    if not configs:
        _fail(name, "configs", "is empty: give at least one config class.")
    model_types = []
    for i, config in enumerate(configs):
        _check_class(name, f"configs[{i}]", config, PretrainedConfig, "config")
        model_type = getattr(config, "model_type", "")
        if not isinstance(model_type, str) or not model_type:
            _fail(name, f"configs[{i}]", f"{config.__name__} has no `model_type`.")
        if model_type in model_types:
            _fail(name, "configs", f"declares model type {model_type!r} twice.")
        if model_type in CONFIG_MAPPING_NAMES:
            _fail(name, "configs", f"declares model type {model_type!r}, which is transformers' own.")
        other = next((spec for spec in _FAMILIES.values() if spec.name != name and model_type in spec.model_types),
                     None)
        if other is not None:
            _fail(name, "configs", f"declares model type {model_type!r}, already registered by family "
                                   f"{other.name!r}.")
        model_types.append(model_type)

    if not isinstance(auto_models, Mapping) or not auto_models:
        _fail(name, "auto_models", "must be a non-empty mapping of Auto class name -> model class(es).")
    heads = {}
    for head, value in auto_models.items():
        if not (isinstance(head, str) and head.startswith("Auto") and isinstance(getattr(transformers, head, None),
                                                                                type)):
            _fail(name, "auto_models", f"key {head!r} is not a transformers Auto class.")
        classes = _classes(value)
        seen = set()
        for i, cls in enumerate(classes):
            where = f"auto_models[{head!r}]" + (f"[{i}]" if len(classes) > 1 else "")
            _check_class(name, where, cls, PreTrainedModel, "model")
            config = getattr(cls, "config_class", None)
            if config not in configs:
                _fail(name, where, f"{cls.__name__}.config_class is {getattr(config, '__name__', config)}, not one "
                                   "of the family's `configs`.")
            if config.model_type in seen:
                _fail(name, where, f"registers a second model for model type {config.model_type!r}.")
            seen.add(config.model_type)
            registered_head = getattr(cls, "_auto_class", None)
            if registered_head is not None and registered_head != head:
                _fail(name, where, f"{cls.__name__} called register_for_auto_class({registered_head!r}), not "
                                   f"{head!r}.")
        heads[head] = classes
    if auto_class not in heads:
        _fail(name, "auto_class", f"{auto_class!r} is not a key of `auto_models` ({sorted(heads)}).")
    lacking = [t for t in model_types if t not in {cls.config_class.model_type for cls in heads[auto_class]}]
    if lacking:
        _fail(name, "auto_models", f"has no {auto_class} model for model type(s) {lacking}.")

    pipelines = dict(pipelines or {})
    for task, cls in pipelines.items():
        _check_class(name, f"pipelines[{task!r}]", cls, Pipeline, "pipeline")

    if adapter is not None:
        if not isinstance(adapter, type):
            _fail(name, "adapter", f"must be an adapter class, got {adapter!r}.")
        missing = [attribute for attribute in ADAPTER_ATTRIBUTES if not hasattr(adapter, attribute)]
        if missing:
            _fail(name, "adapter", f"{adapter.__name__} lacks {missing} of the adapter protocol.")
        if adapter.model_type not in model_types:
            _fail(name, "adapter", f"{adapter.__name__} is for model type {adapter.model_type!r}, which the family "
                                   f"does not have (its model types: {model_types}).")
        other = _ADAPTERS.get(adapter.model_type)
        if other is not None and other.__module__ != adapter.__module__:
            _fail(name, "adapter", f"model type {adapter.model_type!r} already has an adapter ({other.__name__}).")

    if not isinstance(cards, Mapping):
        _fail(name, "cards", "must be a mapping of model type -> CardText.")
    for key, card in cards.items():
        if not isinstance(card, CardText):
            _fail(name, f"cards[{key!r}]", f"must be a CardText, got {type(card).__name__}.")
    lacking = [t for t in model_types if t not in cards]
    if lacking:
        _fail(name, "cards", f"has no card text for model type(s) {lacking}.")
    if answer is not None:
        if answer not in ANSWER_KINDS:
            _fail(name, "answer", f"must be one of {ANSWER_KINDS} or None, got {answer!r}.")
        if adapter is None:
            _fail(name, "answer", "needs an `adapter`: answers are read from stored representations.")
    if answer is not None and not (isinstance(answer_function, str) and
                                   re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", answer_function)):
        _fail(name, "answer_function", f"must be 'module:function' (the function `hf-readonce answer` calls), got "
                                       f"{answer_function!r}.")
    if answer_function is not None and answer is None:
        _fail(name, "answer_function", "needs `answer` ('extractive' or 'generative').")
    if not isinstance(summarize, bool):
        _fail(name, "summarize", f"must be True or False, got {summarize!r}.")
    if summarize and not callable(getattr(adapter, "generation_inputs", None)):
        _fail(name, "summarize", "needs an `adapter` with a `generation_inputs(read)` method: summaries are generated "
                                 "from stored representations.")
    exports = tuple(exports)
    for i, obj in enumerate(exports):
        if obj is None or not hasattr(obj, "__name__"):
            _fail(name, f"exports[{i}]", f"is missing or has no __name__: {obj!r}.")

    # what `hf_readonce` re-exports: a name another family exports as another object would replace that family's
    # name there (`hf_readonce.DeformerBertConfig` becoming another package's class)
    mine = {**_exported_objects(configs, heads, pipelines, exports),
            **{key: ("lazy", value) for key, value in dict(lazy_exports or {}).items()}}
    for other in _FAMILIES.values():
        if other.name == name:
            continue
        theirs = {**other.exported(), **{key: ("lazy", value) for key, value in other.lazy_exports.items()}}
        clash = sorted(key for key in mine.keys() & theirs.keys() if mine[key] is not theirs[key]
                       and not (isinstance(mine[key], tuple) and mine[key] == theirs[key]))
        if clash:
            raise ValueError(f"family {name!r}: its classes or exports named {clash} are other objects than family "
                             f"{other.name!r}'s of those names (`hf_readonce` re-exports every family's names): "
                             "rename them.")

    spec = FamilySpec(name=name, configs=configs, auto_models=MappingProxyType(heads), auto_class=auto_class,
                      cards=MappingProxyType(dict(cards)), pipelines=MappingProxyType(pipelines), adapter=adapter,
                      answer=answer, answer_function=answer_function, summarize=summarize, exports=exports, lazy_exports=MappingProxyType(dict(lazy_exports or {})),
                      module=module)
    for config in configs:
        transformers.AutoConfig.register(config.model_type, config, exist_ok=True)
    for head, classes in heads.items():
        for cls in classes:
            getattr(transformers, head).register(cls.config_class, cls, exist_ok=True)
    _FAMILIES[name] = spec
    if adapter is not None:
        _ADAPTERS[adapter.model_type] = adapter
    for callback in _on_register:
        callback(spec)
    return spec


def registered_families() -> dict[str, FamilySpec]:
    """A copy of the registry: family name -> [`FamilySpec`], in registration order."""
    return dict(_FAMILIES)


def family_of(model_type: str | None) -> FamilySpec:
    """The family of a model type, or of a checkpoint type its adapter loads (e.g. `bert`, loaded as a DeFormer).

    Raises:
        ValueError: no registered family has that model type (the message lists the known ones).
    """
    for spec in _FAMILIES.values():
        if model_type in spec.model_types:
            return spec
    for spec in _FAMILIES.values():
        if model_type in spec.checkpoint_model_types:
            return spec
    known = sorted(t for spec in _FAMILIES.values() for t in spec.model_types)
    raise ValueError(f"no hf-readonce family has model_type {model_type!r}; known: {known}.")


def answer_function(spec: FamilySpec):
    """The extractive answering function a family declares (`spec.answer_function`, `"module:name"`), imported.

    Args:
        spec ([`FamilySpec`]): the family.

    Returns:
        `Callable`: `function(model, tokenizer, store, examples, **options) -> dict[str, str]` (see [`FamilySpec`]).

    Raises:
        ValueError: the family declares none, or it cannot be imported (naming the family and the function).
    """
    if spec.answer_function is None:
        raise ValueError(f"family {spec.name!r} declares no `answer_function`.")
    module, _, attribute = spec.answer_function.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"family {spec.name!r}: `answer_function` {spec.answer_function!r} cannot be imported "
                         f"({error}).") from None


def registered_cards() -> dict[str, CardText]:
    """Model type -> [`CardText`], over every family (their own model types and the checkpoint types they
    describe)."""
    return {model_type: card for spec in _FAMILIES.values() for model_type, card in spec.cards.items()}


def registered_adapters() -> dict[str, type]:
    """A copy of the adapters: model type -> adapter class, for every family that stores representations."""
    return dict(_ADAPTERS)


def get_adapter_class(model_type: str | None) -> type:
    """The adapter class registered for `model_type`, or for a checkpoint type one of them loads (e.g. `bert`,
    loaded as a DeFormer).

    Raises:
        ValueError: if no adapter is registered for that model type (the message lists the known ones).
    """
    if model_type in _ADAPTERS:
        return _ADAPTERS[model_type]
    for adapter_class in _ADAPTERS.values():
        if model_type in getattr(adapter_class, "checkpoint_model_types", ()):
            return adapter_class
    loaders = sorted({t for a in _ADAPTERS.values() for t in a.checkpoint_model_types} - set(_ADAPTERS))
    raise ValueError(
        f"no representation adapter for model_type {model_type!r}; known: {sorted(_ADAPTERS)}"
        + (f" (checkpoints of type {', '.join(loaders)} load as one of them)." if loaders else ".")
    )


def get_adapter(model, tokenizer, **settings):
    """The adapter for `model` (chosen by `model.config.model_type`), built with `settings`.

    Raises:
        ValueError: if no adapter is registered for that model type; bad settings (from the adapter).
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in _ADAPTERS:
        get_adapter_class(None if model_type is None else f"{model_type} (model)")  # raises, naming the known ones
    return _ADAPTERS[model_type](model, tokenizer, **settings)


__all__ = ["ANSWER_KINDS", "CardText", "FamilySpec", "answer_function", "family_of", "get_adapter", "get_adapter_class",
           "register_family", "registered_adapters", "registered_cards", "registered_families"]
