"""Latest value per sender: each neighbour's newest broadcast (personalized coordinate descent).

A neighbour broadcasts its model with an increasing sequence number (from 1 to the published
number of releases) and never retries: its next broadcast supersedes the last. The mailbox
keeps, per sender, the value with the highest sequence. An older value than the one held is
refused as stale (the receiver logs it as rejected, payload included: it reached the node but
was not used). A sequence beyond the published schedule is refused before it can make every
later genuine broadcast look stale. A second copy of a value already taken (same MessageId,
same payload) is acknowledged again without a second record, so one message always gets one
answer; another payload under a taken MessageId is refused, and so logged with it. Checking,
logging and keeping share one lock: a value is either logged as received *and* kept, or refused.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from node.codec import digest, pack
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

    def __init__(self, journal: Journal, *, last_sequence: int) -> None:
        """`last_sequence`: the published number of broadcasts a sender makes at most."""
        self._journal = journal
        self._last_sequence = last_sequence
        self._latest: dict[int, Latest] = {}
        # sender -> sequence -> digest of the payload of every broadcast logged as received
        self._taken: dict[int, dict[int, bytes]] = defaultdict(dict)
        self._changed = asyncio.Condition()

    async def handle(self, sender: int, message: Message) -> None:
        """The mailbox's handler: log and keep a newer value, acknowledge a copy, refuse a stale or foreign one."""
        sequence = message.id.sequence
        if sequence == 0:  # MessageId's unset value: the broadcast would be unordered
            raise Refusal("INVALID_ARGUMENT", "a broadcast carries a sequence number from 1")
        if sequence > self._last_sequence:
            raise Refusal("OUT_OF_RANGE", f"sequence {sequence} is beyond the published {self._last_sequence} "
                                          "broadcasts of a sender")
        async with self._changed:
            taken = self._taken[sender].get(sequence)
            if taken == message.digest:
                return
            if taken is not None:
                raise Refusal("ALREADY_EXISTS", f"sequence {sequence} of node {sender} came before with another "
                                                "payload", names_sender=True)
            held = self._latest.get(sender)
            if held is not None and sequence < held.sequence:
                raise Refusal("FAILED_PRECONDITION",
                              f"sequence {sequence} of node {sender} is stale: {held.sequence} is already here",
                              names_sender=True)
            await self._journal.received(sender, message)
            self._taken[sender][sequence] = message.digest
            self._latest[sender] = Latest(sequence, message.payload)
            self._changed.notify_all()

    def recall(self, sender: int, latest: Latest) -> None:
        """A value this node logged as received before it was restarted: held again (the newest wins), and
        a copy of it is acknowledged without a second record. Called before the node serves anyone."""
        self._taken[sender][latest.sequence] = digest(pack(latest.value)[0])
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
