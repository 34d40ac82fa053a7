"""Sets of node ids written as ranges (`0-255`, `0-3,8`): how a process names the ids it hosts."""

from __future__ import annotations

from collections.abc import Iterable

from node.errors import ConfigError


def parse_ids(spec: str) -> tuple[int, ...]:
    """`0-3,8` -> (0, 1, 2, 3, 8): sorted, each id once; ConfigError on anything else."""
    ids: set[int] = set()
    for part in spec.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ConfigError(f"node ids {spec!r}: expected ids and ranges such as 0-3,8")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ConfigError(f"node ids {spec!r}: range {part.strip()} runs backwards")
        ids.update(range(first, last + 1))
    return tuple(sorted(ids))


def id_runs(ids: Iterable[int]) -> list[tuple[int, int]]:
    """The maximal runs of consecutive ids as (first, last), ascending, e.g. (0, 1, 2, 3, 8) -> [(0, 3), (8, 8)]."""
    ordered = sorted(set(ids))
    runs: list[tuple[int, int]] = []
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            runs.append((ordered[start], ordered[index - 1]))
            start = index
    return runs


def format_ids(ids: Iterable[int]) -> str:
    """The shortest `parse_ids` spelling of a set of ids, e.g. (0, 1, 2, 3, 8) -> `0-3,8`."""
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in id_runs(ids))


def describe_nodes(ids: Iterable[int]) -> str:
    """`node 3` or `nodes 0-3,8`, for messages a person reads."""
    ordered = sorted(set(ids))
    return f"node {ordered[0]}" if len(ordered) == 1 else f"nodes {format_ids(ordered)}"
