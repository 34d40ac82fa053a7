"""Sets of node ids written as ranges (`0-255`, `0-3,8`): how a process names the ids it hosts."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Set

from node.errors import ConfigError


class IdRanges(Set[int]):
    """A set of node ids held as its maximal runs of consecutive ids: membership, size and bounds are arithmetic
    on the runs, so a set naming billions of ids (a certificate's `netdp-nodes-0-4294967295`) costs no more
    than one naming a few."""

    def __init__(self, runs: Iterable[tuple[int, int]]) -> None:
        """`runs`: (first, last) pairs in any order, overlapping or not; a backwards pair names no id."""
        merged: list[tuple[int, int]] = []
        for first, last in sorted(run for run in runs if run[0] <= run[1]):
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
            else:
                merged.append((first, last))
        self.runs = tuple(merged)
        self._firsts = [first for first, _ in merged]

    @classmethod
    def of(cls, ids: Iterable[int]) -> IdRanges:
        """The set of `ids`, listed one by one."""
        return cls(id_runs(ids))

    def __contains__(self, node_id: object) -> bool:
        if not isinstance(node_id, int):
            return False
        index = bisect_right(self._firsts, node_id) - 1
        return index >= 0 and node_id <= self.runs[index][1]

    def __iter__(self) -> Iterator[int]:
        for first, last in self.runs:
            yield from range(first, last + 1)

    def __len__(self) -> int:
        return sum(last - first + 1 for first, last in self.runs)

    @property
    def highest(self) -> int:
        """The largest id of a non-empty set."""
        return self.runs[-1][1]

    def __repr__(self) -> str:
        return f"IdRanges({format_ids(self)!r})"


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
    if isinstance(ids, IdRanges):
        return list(ids.runs)
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
    return _spelled(id_runs(ids))


def describe_nodes(ids: Iterable[int]) -> str:
    """`node 3` or `nodes 0-3,8`, for messages a person reads."""
    runs = id_runs(ids)
    return f"node {runs[0][0]}" if len(runs) == 1 and runs[0][0] == runs[0][1] else f"nodes {_spelled(runs)}"


def _spelled(runs: Iterable[tuple[int, int]]) -> str:
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)
