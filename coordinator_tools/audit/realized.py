"""What every protocol's realized run answers: the one type a plan, a replay and a report read of any run.

A protocol's auditor rebuilds its own run type (a transcript, an exchange schedule, ...) and a planner
simulates one; everything protocol-neutral reads it through `RealizedRun`.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from node.topology import Topology


class RealizedRun(Protocol):
    """A protocol's transcript of what really happened (or was planned): what reports read."""

    @property
    def protocol(self) -> str: ...

    @property
    def topology(self) -> Topology: ...

    @property
    def n(self) -> int: ...

    def run_section(self) -> dict[str, object]:
        """The report's `run` object: `run_header`'s keys, then the protocol's own."""
        ...

    def node_summary(self, node: int) -> dict[str, object]:
        """Protocol facts about one node for the replay's per-node summary."""
        ...


RunT = TypeVar("RunT", bound=RealizedRun)  # the realized run an auditor rebuilds and accounts
