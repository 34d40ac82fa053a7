"""A mailbox's quick path: a one-way message taken (or refused) without waiting, applied once durably logged.

`Receiver.take` runs the checks every message passes, then the kind's taker; a bundle's records are
logged together and each message's `settle` applies it afterwards. Apart from the receiver, so that a
mailbox names the contract without importing the receiver (and through it the topology).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from netdp.v1 import viewlog_pb2
from node.message import Message
from node.refusal import Refusal


def _settled(logged: bool) -> None:
    """Nothing to apply: a refusal is complete once logged."""


@dataclass(slots=True)  # one per message received: plain slots, no frozen set-up
class Taken:
    """A message a mailbox took without waiting, or refused: the records that log it, and what `settle` applies
    once they are durable (True) or could not be written (False), so that nothing is applied unlogged."""

    records: tuple[viewlog_pb2.Record, ...]
    settle: Callable[[bool], None] = field(default=_settled)
    refusal: Refusal | None = None  # set for a refused message: its records are the refusal's


# A mailbox's quick path for one-way messages: (sender, message) -> Taken, or raise Refusal, all without waiting;
# the caller logs the records of a whole bundle together, then settles each.
Taker = Callable[[Any, Message], Taken]
