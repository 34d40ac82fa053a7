"""Argument types of the `netdp` command line: a bad number names its flag and what was expected, in one line.

They check the bounds the library checks (`audit.plan.Bound`), so a flag and its API keyword refuse the
same values with the same words.
"""

from __future__ import annotations

import argparse

from coordinator_tools.audit.plan import COUNT, NON_NEGATIVE, ORDER, POSITIVE, PROBABILITY, Bound
from coordinator_tools.experiment import OPTION_LABELS


def positive(text: str) -> float:
    return _number(text, POSITIVE)


def non_negative(text: str) -> float:
    return _number(text, NON_NEGATIVE)


def renyi_order(text: str) -> float:
    return _number(text, ORDER)


def probability(text: str) -> float:
    return _number(text, PROBABILITY)


def count(text: str) -> int:
    return int(_number(text, COUNT))


def _number(text: str, bound: Bound) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {bound.meaning}, got {text!r}") from None
    if not bound.valid(value):
        raise argparse.ArgumentTypeError(f"expected {bound.meaning}, got {text!r}")
    return value


def flag_names(args: argparse.Namespace) -> dict[str, str]:
    """Each option's destination and how the user gave it ('target_eps' -> 'argument --target-eps', or the key of
    an experiment file): a value the parser let through and a model refused is then named as the user wrote it
    (`node.schema.config_errors`)."""
    named = {name: "argument --" + name.replace("_", "-") for name in vars(args)}
    return {**named, **getattr(args, OPTION_LABELS, {})}
