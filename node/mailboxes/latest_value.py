"""Latest value per sender: each neighbour's newest broadcast (personalized coordinate descent).

A neighbour broadcasts its model with an increasing sequence number (from 1) and never
retries: its next broadcast supersedes the last. The mailbox keeps, per sender, the value
with the highest sequence. An older value than the one held is refused as stale (the
receiver logs it as rejected, payload included: it reached the node but was not used). A
second copy of a value already taken (same MessageId) is acknowledged again without a
second record, so one message always gets one answer. Checking, logging and keeping share
one lock: a value is either logged as received *and* kept, or refused.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from node.journal import Journal
from node.message import Message
from node.refusal import Refusal


@dataclass(frozen=True)
class Latest:
    """A sender's newest value and the broadcast sequence number it came with."""

    sequence: int
    value: np.ndarray


class LatestValues:
    """The newest value each sender's broadcasts brought to this node."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._latest: dict[int, Latest] = {}
        self._taken: dict[int, set[int]] = defaultdict(set)  # sender -> every sequence logged as received
        self._changed = asyncio.Condition()

    async def handle(self, sender: int, message: Message) -> None:
        """The mailbox's handler: log and keep a newer value, acknowledge a copy, refuse a stale one."""
        sequence = message.id.sequence
        if sequence == 0:  # MessageId's unset value: the broadcast would be unordered
            raise Refusal("INVALID_ARGUMENT", "a broadcast carries a sequence number from 1")
        async with self._changed:
            if sequence in self._taken[sender]:
                return
            held = self._latest.get(sender)
            if held is not None and sequence < held.sequence:
                raise Refusal("FAILED_PRECONDITION",
                              f"sequence {sequence} of node {sender} is stale: {held.sequence} is already here")
            await self._journal.received(sender, message)
            self._taken[sender].add(sequence)
            self._latest[sender] = Latest(sequence, message.payload)
            self._changed.notify_all()

    def recall(self, sender: int, latest: Latest) -> None:
        """A value this node logged as received before it was restarted: held again (the newest wins), and
        a copy of it is acknowledged without a second record. Called before the node serves anyone."""
        self._taken[sender].add(latest.sequence)
        held = self._latest.get(sender)
        if held is None or latest.sequence > held.sequence:
            self._latest[sender] = latest

    def snapshot(self) -> dict[int, Latest]:
        """The newest value of every sender heard from so far; later arrivals do not change this copy."""
        return dict(self._latest)

    async def wait_beyond(self, sender: int, sequence: int, timeout_s: float) -> Latest | None:
        """The sender's newest value once its sequence passes `sequence`; None if it did not within the timeout."""
        async with self._changed:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._changed.wait_for(lambda: self._newer(sender, sequence) is not None)
            except TimeoutError:
                pass
            return self._newer(sender, sequence)

    def _newer(self, sender: int, sequence: int) -> Latest | None:
        latest = self._latest.get(sender)
        return latest if latest is not None and latest.sequence > sequence else None
