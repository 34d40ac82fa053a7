"""The realized schedule of a randomized Muffliato run: which pairwise exchanges really applied.

Every node starts from x_v + η_v; its value changes only at the exchanges it committed, to
the mean of its value and its peer's. An exchange committed on one side only (the initiator
died between its commit and the delivery of its decision) is half-applied: only that side
changed. Exchanges are kept in an order consistent with every node's local sequence; any such
order gives the same values, because exchanges on disjoint pairs commute.

A value message (an accept or a commit, received or refused after its exchange closed) is
the sender's value just before the exchange, so it is named by (sender, exchange index).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from coordinator_tools.audit.protocols.base import run_header
from node.protocols.muffliato_async import PROTOCOL_NAME
from node.topology import Topology

Status = Literal["committed", "half_applied", "declined", "aborted"]
ValueRef = tuple[int, int]  # (sender, index of the exchange in the schedule)


@dataclass(frozen=True)
class Exchange:
    """One pairwise exchange as both logs (or what is left of them) show it."""

    exchange_id: str
    initiator: int
    responder: int
    initiator_sequence: int
    responder_sequence: int | None  # None: the responder never took a sequence number for it
    initiator_applied: bool
    responder_applied: bool
    declined: bool = False

    @property
    def status(self) -> Status:
        if self.initiator_applied and self.responder_applied:
            return "committed"
        if self.initiator_applied or self.responder_applied:
            return "half_applied"
        return "declined" if self.declined else "aborted"

    def applied(self, node: int) -> bool:
        """Whether `node`'s value became the pair's mean at this exchange."""
        return self.initiator_applied if node == self.initiator else self.responder_applied

    def other(self, node: int) -> int:
        return self.responder if node == self.initiator else self.initiator


@dataclass(frozen=True)
class ExchangeSchedule:
    """What happened in a randomized Muffliato run (or in one simulated schedule of it).

    * ``exchanges`` in an order consistent with every node's local sequence numbers;
    * ``received[v]`` the values in v's view, as (sender, exchange index);
    * ``ticks[v]`` the ticks of v's clock (its FinalOutput's rounds_completed).
    """

    topology: Topology
    exchanges: tuple[Exchange, ...]
    received: tuple[tuple[ValueRef, ...], ...]
    ticks: tuple[int, ...]

    protocol = PROTOCOL_NAME

    @property
    def n(self) -> int:
        return self.topology.n

    def by_status(self, status: Status) -> list[Exchange]:
        return [exchange for exchange in self.exchanges if exchange.status == status]

    def summary(self) -> dict[str, object]:
        """The report's `exchanges`: counts, and every aborted and half-applied exchange by id."""
        return {
            "committed": len(self.by_status("committed")),
            "declined": len(self.by_status("declined")),
            "aborted": [exchange.exchange_id for exchange in self.by_status("aborted")],
            "half_applied": [exchange.exchange_id for exchange in self.by_status("half_applied")],
        }

    def run_section(self) -> dict[str, object]:
        """The report's `run`: the schedule that was accounted."""
        return run_header(self.topology) | {
            "activation": self.topology.protocol.activation,
            "rounds_completed": list(self.ticks),
            "exchanges": {status: len(self.by_status(status))
                          for status in ("committed", "half_applied", "declined", "aborted")},
        }

    def node_summary(self, node: int) -> dict[str, object]:
        """A node's ticks and how many exchanges changed its value."""
        applied = sum(exchange.applied(node) for exchange in self.exchanges
                      if node in (exchange.initiator, exchange.responder))
        return {"rounds_completed": self.ticks[node], "exchanges_applied": applied}


def walk(schedule: ExchangeSchedule, state: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Apply the schedule to `state` (one row per node, changed in place), exchange by exchange.

    Yields (index, initiator's row, responder's row) just before each exchange; the rows may
    be coefficients (float or rational objects) or values, since the update is linear.
    """
    for index, exchange in enumerate(schedule.exchanges):
        a, b = exchange.initiator, exchange.responder
        before_a, before_b = state[a].copy(), state[b].copy()
        yield index, before_a, before_b
        if exchange.initiator_applied or exchange.responder_applied:
            mean = (before_a + before_b) / 2
            if exchange.initiator_applied:
                state[a] = mean
            if exchange.responder_applied:
                state[b] = mean
