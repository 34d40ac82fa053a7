"""One experiment file: a command's options in TOML, so that a run, a sweep or a comparison is one file to rerun.

`netdp run`, `netdp sweep`, `netdp compare` and `netdp demo` take `--experiment FILE.toml`. The file
names its command and gives the command's options as top-level keys, each spelt as its flag without
the leading dashes (`target-eps` for `--target-eps`; a positional argument by its name, `topology`):

    command = "demo"            # optional; when given it must be the command that reads the file
    protocol = "muffliato"
    n = 16
    target-eps = 1.0
    insecure = true             # a switch: true sets it, false leaves it off
    kill = ["3@2"]              # a repeatable flag: a list, one entry per use
    sigma = [0.5, 1.0]          # a sweep's comma list may be a TOML list

Each value is checked by the same argument type as its flag (and, later, by the same models), and a
bad one is refused in one line naming the file and its key. A flag given on the command line wins over
the file's key (a repeatable one adds to it). The command's output folder keeps a copy of the file as
`experiment.toml`, with the overriding flags appended as a comment.
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from node.errors import ConfigError

EXPERIMENT_FLAG = "--experiment"
COPY_FILE = "experiment.toml"
OPTION_LABELS = "option_labels"  # where `netdp` records on its arguments the options the file set, by their keys


@dataclass(frozen=True)
class Experiment:
    """An experiment file read for one command: its path, the argv its keys stand for, and which key set which
    destination (so that a later error names the key the user wrote)."""

    path: Path
    argv: list[str]  # the command line's own arguments
    keys: dict[str, str] = field(default_factory=dict)  # destination -> the file's key, where no flag overrode it

    def labels(self) -> dict[str, str]:
        """Destination -> how an error names the value the file gave it: the file and its key."""
        return {dest: f"{self.path}: key {key!r}" for dest, key in self.keys.items()}


def add_experiment_argument(parser: argparse.ArgumentParser) -> None:
    """`--experiment FILE.toml` on a command that reads its options from one file too (read by `expand`)."""
    parser.add_argument(EXPERIMENT_FLAG, type=Path, metavar="FILE.toml",
                        help="read this command's options from a TOML file (keys named as the flags, without "
                             "dashes); flags given here win; the output folder keeps a copy as experiment.toml")


def expand(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[list[str], Experiment | None]:
    """argv with an experiment file's keys put in as flags before the command line's own (which then win).

    `parser` is the command's own parser; argv is what follows the command's name.
    """
    path = _experiment_path(argv)
    if path is None or not any(EXPERIMENT_FLAG in action.option_strings for action in parser._actions):
        return list(argv), None
    table = _read(path)
    command = parser.prog.split()[-1]
    named = table.pop("command", command)
    if named != command:
        raise ConfigError(f"{path}: key 'command': this file is for `netdp {named}`, not `netdp {command}`")
    actions = _actions_by_key(parser)
    flags: list[str] = []
    positional: list[str] = []
    keys: dict[str, str] = {}
    for key, value in table.items():
        action = actions.get(key)
        if action is None:
            close = difflib.get_close_matches(key, list(actions), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{path}: unknown key {key!r} for `netdp {command}`{hint}")
        tokens = _tokens(path, key, value, action)
        keys[action.dest] = key
        if action.option_strings:
            flags += tokens
        else:
            positional += tokens
    typed = _typed(parser, argv)
    kept = {dest: key for dest, key in keys.items() if dest not in typed}
    return [*positional, *flags, *argv], Experiment(path, list(argv), kept)


def _typed(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The destinations of the flags typed on the command line (which win over the file's keys)."""
    typed = {token.split("=", 1)[0] for token in argv if token.startswith("--")}
    return {action.dest for action in parser._actions if typed & set(action.option_strings)}


def keep_copy(experiment: Experiment, folder: Path) -> None:
    """Copy the experiment file into the command's output folder, with the overriding flags as a comment."""
    if not Path(folder).is_dir():
        return
    text = experiment.path.read_text(encoding="utf-8")
    overrides = [token for token in experiment.argv if token != EXPERIMENT_FLAG and
                 not token.startswith(EXPERIMENT_FLAG + "=") and token != str(experiment.path)]
    if overrides:
        text += ("" if text.endswith("\n") else "\n") + f"# overridden on the command line: {' '.join(overrides)}\n"
    (Path(folder) / COPY_FILE).write_text(text, encoding="utf-8")


def _experiment_path(argv: Sequence[str]) -> Path | None:
    for index, token in enumerate(argv):
        if token.startswith(EXPERIMENT_FLAG + "="):
            return Path(token.split("=", 1)[1])
        if token == EXPERIMENT_FLAG and index + 1 < len(argv):
            return Path(argv[index + 1])
    return None


def _read(path: Path) -> dict[str, object]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read file ({exc.strerror})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def _actions_by_key(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each option a file may set, by its key: the long flag without dashes, or a positional's name."""
    actions: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or EXPERIMENT_FLAG in action.option_strings:
            continue
        if not action.option_strings:
            actions[action.dest] = action
        for option in action.option_strings:
            if option.startswith("--"):
                actions[option[2:]] = action
    return actions


def _tokens(path: Path, key: str, value: object, action: argparse.Action) -> list[str]:
    """The command-line tokens for one key, each value checked by the flag's own type and choices."""
    where = f"{path}: key {key!r}"
    flag = action.option_strings[-1] if action.option_strings else None
    if action.nargs == 0:  # a switch: store_true, store_const
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return [flag] if value and flag else []
    if isinstance(action, argparse._AppendAction):
        values = value if isinstance(value, list) else [value]
        for item in values:
            _check(where, item, action)
        return [token for item in values for token in (flag, str(item)) if token is not None]
    if isinstance(value, list):  # a comma list (sweep's options)
        value = ",".join(str(item) for item in value)
    _check(where, value, action)
    return [str(value)] if flag is None else [flag, str(value)]


def _check(where: str, value: object, action: argparse.Action) -> None:
    """The flag's argument type and choices applied to one value, a failure named by the file's key."""
    if isinstance(value, Mapping | list | bool):
        raise ConfigError(f"{where}: expected a single value, got {value!r}")
    text = str(value)
    try:
        converted = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
        message = str(exc) or f"invalid value {text!r}"
        if isinstance(exc, ValueError) and not isinstance(exc, argparse.ArgumentTypeError):
            message = f"invalid {getattr(action.type, '__name__', 'value')} value: {text!r}"
        raise ConfigError(f"{where}: {message}") from None
    if action.choices is not None and converted not in action.choices:
        shown = ", ".join(map(repr, action.choices))
        raise ConfigError(f"{where}: invalid choice {text!r} (choose from {shown})")
