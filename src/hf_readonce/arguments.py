"""Command-line argument handling shared by `hf-readonce` (`hf_readonce.cli`) and the demo
(`hf_readonce.recipes.demo`, which parses its own arguments and, being below the CLI, cannot import it): one-line
usage errors, the option types of counts and rates, and what a MODEL argument names."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

USAGE_ERROR = 2  # the exit status of a usage error, as argparse's


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, like every other error of the CLI: `hf-readonce encode:
    error: argument --store-dtype/--dtype: invalid choice ... (hf-readonce encode --help lists the options)`, exit
    status 2 (the full usage of a command with twenty options buried the reason).

    It also records, through argparse's public calls only, what the CLI asks of its parsers afterwards:

    - `option_dests` (`dict[str, str]`): each option string it takes -> the destination it sets (`{"--help":
      "help", "--max-passage-length": "max_passage_length", ...}`), from the actions that `add_argument` (its own,
      and that of the groups it makes) returns, and from its `parents` that are parsers of this class (argparse
      copies a parent's options without calling `add_argument`);
    - `path_arguments` (`dict[str, str]`): the destination of each argument of type [`path_argument`] -> how the
      CLI names it (`{"store": "--store", "model": "MODEL"}`: its long option, a positional argument by its
      destination in capitals), recorded as `option_dests` is;
    - `commands` (`dict[str, OneLineArgumentParser]`): the parser of each subcommand, by name, as the code that
      builds the subcommands fills it (`hf_readonce.cli.build_parser`).
    """

    def __init__(self, *args, **kwargs):
        self.option_dests: dict[str, str] = {}
        self.path_arguments: dict[str, str] = {}
        self.commands: dict[str, OneLineArgumentParser] = {}
        try:
            parents = inspect.signature(argparse.ArgumentParser).bind(*args, **kwargs).arguments.get("parents", ())
        except TypeError:  # arguments argparse refuses: it says so below
            parents = ()
        for parent in parents:
            self.option_dests.update(getattr(parent, "option_dests", {}))
            self.path_arguments.update(getattr(parent, "path_arguments", {}))
        super().__init__(*args, **kwargs)

    def _record(self, action: argparse.Action) -> argparse.Action:
        self.option_dests.update(dict.fromkeys(action.option_strings, action.dest))
        if action.type is path_argument:
            long = [option for option in action.option_strings if option.startswith("--")] or action.option_strings
            self.path_arguments[action.dest] = long[0] if long else action.dest.upper()
        return action

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        """`argparse.ArgumentParser.add_argument`, recording the option strings of the action in `option_dests`.

        Returns:
            `argparse.Action`: the action added.
        """
        return self._record(super().add_argument(*args, **kwargs))

    def _recording(self, group):
        """`group`, whose `add_argument` records in `option_dests`, as do the groups made from it (argparse's titled
        exclusive group: `add_argument_group(...).add_mutually_exclusive_group()`)."""
        add = group.add_argument
        group.add_argument = lambda *args, **kwargs: self._record(add(*args, **kwargs))
        for name in ("add_argument_group", "add_mutually_exclusive_group"):
            make = getattr(group, name, None)
            if make is not None:
                setattr(group, name, lambda *args, _make=make, **kwargs: self._recording(_make(*args, **kwargs)))
        return group

    def add_argument_group(self, *args, **kwargs):
        """`argparse.ArgumentParser.add_argument_group`; the options added to the group are recorded in
        `option_dests`."""
        return self._recording(super().add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, **kwargs):
        """`argparse.ArgumentParser.add_mutually_exclusive_group`; the options added to the group are recorded in
        `option_dests`."""
        return self._recording(super().add_mutually_exclusive_group(**kwargs))

    def parse_known_args(self, args=None, namespace=None):
        """`argparse.ArgumentParser.parse_known_args`, keeping the argument strings it parses for [`error`]."""
        self._argument_strings = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        """Print `message` and the pointer to `--help` to stderr on one line and exit with status 2 (argparse's own
        `error` prints the whole usage first). An option left without its value because the value is a negative
        number argparse reads as an option (`--max-diff -1e3`: argparse takes `-1`, `-0.5` as numbers, not
        `-1e3`, `-1_000` or `-inf`) is told to give it as `--max-diff=-1e3`, the form argparse always reads.

        Raises:
            SystemExit: always (status 2).
        """
        hint = self._negative_value_hint(message)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}{hint} (`{self.prog} --help` lists the options)\n")

    def _negative_value_hint(self, message: str) -> str:
        """`; -1e3 is read as an option here: write --opt=-1e3` when `message` says an option got no value and the
        string after it on the command line is a negative number; else `""`. The option is named as it was typed,
        also as an abbreviation argparse accepts (`--null-score -1e3` for `--null-score-diff-threshold`)."""
        found = re.fullmatch(r"argument (\S+): expected (?:one argument|at least one argument|\d+ arguments)", message)
        if found is None:
            return ""
        strings = getattr(self, "_argument_strings", None)
        strings = sys.argv[1:] if strings is None else strings
        names = found.group(1).split("/")

        def names_it(option: str) -> bool:
            return option in names or (self.allow_abbrev and option.startswith("--") and len(option) > 2
                                       and "=" not in option and any(name.startswith(option) for name in names))

        for option, value in zip(strings, strings[1:]):
            if option == "--":  # what follows is positional
                break
            if names_it(option) and _negative_number(value):
                return f"; {value} is read as an option here: write {option}={value}"
        return ""


def _negative_number(text: str) -> bool:
    """Whether `text` is a negative number as `float` reads it (`-1e3`, `-1_000`, `-inf`)."""
    if not text.startswith("-"):
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def positive_int(value: str) -> int:
    """The type of an option that counts something (`--batch-size`, `--max-answer-length`, `--max-eval-samples`):
    a whole number >= 1.

    Raises:
        argparse.ArgumentTypeError: otherwise (argparse's usage error naming the option, exit status 2).
    """
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {number}")
    return number


def positive_float(value: str) -> float:
    """The type of a rate (`--learning-rate`): a finite number > 0.

    Raises:
        argparse.ArgumentTypeError: otherwise (argparse's usage error naming the option, exit status 2).
    """
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}") from None
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return number


def path_argument(value: str) -> str:
    """The type of an option or argument that names a file or folder (`--store`, `--documents`, `--output`, MODEL):
    any non-empty string, as given. An empty one (`--store "$STORE"` with the variable unset) would name the current
    folder, so a store, an output or a published repo would land there without a word.

    Raises:
        argparse.ArgumentTypeError: an empty or blank string (argparse's usage error naming the option, exit status
            2).
    """
    if not value.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {value!r} (an empty variable?)")
    return value


def local_model_or_hub_id(name: str) -> str:
    """What a MODEL argument names, as far as this machine can tell: an existing folder stays (an existing file is an
    error); a shipped checkpoint's name (`reference-deformer`, `reference-qa`, their folder names or repo ids; see
    `hf-readonce checkpoints`) becomes its folder; a name that can only be a path (absolute, `./`, `~`, its first
    folder exists here, or no valid Hub repo id) and does not exist is an error, before any Hub lookup; anything else
    is returned as a Hub repo id (whether the Hub has it is the caller's to find out).

    Args:
        name (`str`): the argument as given.

    Returns:
        `str`: a folder, or a Hub repo id.

    Raises:
        FileNotFoundError: a path that does not exist, or a shipped checkpoint with no copy here (the message says
            what to do). ValueError: a path that is a file, not a folder; a shipped checkpoint whose checksum
            differs.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from .weights import SHIPPED_NAMES, shipped_checkpoint_path

    path = Path(name).expanduser()
    if path.exists() and not path.is_dir():  # e.g. the documents file given as MODEL: transformers would call it
        # an invalid config file
        raise ValueError(f"model {name!r} is a file, not a checkpoint folder or Hub id (a checkpoint is the folder "
                         "`save_pretrained` writes, with config.json; `hf-readonce checkpoints` lists the shipped "
                         "ones).")
    if path.exists():
        return str(path)
    shipped = shipped_checkpoint_path(name)
    if shipped is not None:
        return str(shipped)
    try:
        validate_repo_id(name)
        local_looking = name.startswith((".", "~")) or (len(path.parts) > 1 and Path(path.parts[0]).is_dir())
    except HFValidationError:
        local_looking = True
    if local_looking:
        raise FileNotFoundError(f"model {name!r}: {path} does not exist (no such folder; shipped checkpoints: "
                                f"{', '.join(SHIPPED_NAMES)}).")
    return name



def silence_progress_bars():
    """Silence the bars of huggingface_hub and transformers (its "Loading weights" bar), without importing
    transformers where it is not loaded yet (it reads huggingface_hub's setting when imported).

    Used by `hf-readonce --no-progress` and the demo's `--no-progress`.

    Returns:
        A function that puts both settings back as they were (for `main` called from Python).
    """
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    hub_was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    hf_logging = sys.modules.get("transformers.utils.logging")
    # transformers imported later reads huggingface_hub's setting then
    transformers_was_enabled = hf_logging.is_progress_bar_enabled() if hf_logging else not hub_was_disabled
    if hf_logging is not None:
        hf_logging.disable_progress_bar()

    def restore():
        logging_now = sys.modules.get("transformers.utils.logging")
        if logging_now is not None and transformers_was_enabled:
            logging_now.enable_progress_bar()  # (also re-enables huggingface_hub's, set right below)
        if hub_was_disabled:
            disable_progress_bars()
        else:
            enable_progress_bars()

    return restore


__all__ = ["OneLineArgumentParser", "local_model_or_hub_id", "path_argument", "positive_float", "positive_int",
           "silence_progress_bars"]
