"""Bundled deliveries: the one-way messages a process's node ids send in one turn of the event loop go together.

A `Courier` collects what the ids of this process send to ids hosted here, and hands each
bundle over at once, in one task, rather than one task, timer and log write per message.
`accept_bundle` is the receiving side's single pass: every message is checked by the
Receiver of its own id (`Receiver.take`, the same checks as one message alone) and taken by
its mailbox's quick path; the records of the whole bundle, refusals included, are then
committed together, each id's in its own view log (`journal.write_view_logs`: one group
commit), and only then is each message applied and acknowledged. A message of a kind whose
mailbox has no quick path (it may wait: an exchange, a token) is handed to `Receiver.accept`
on its own, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from netdp.v1 import peer_pb2, viewlog_pb2
from node.journal import Journal, write_view_logs
from node.mailboxes.quick_path import Taken
from node.receiver import Receiver, Reply
from node.refusal import Refusal
from node.transport.base import LinkError, settle


@dataclass(frozen=True)
class Settled:
    """What became of one message of a bundle: taken (and durably logged), or refused (and that logged)."""

    refusal: Refusal | None = None


TAKEN = Settled()  # what most messages of a bundle become: one shared outcome


async def accept_bundle(items: Sequence[tuple[Receiver, peer_pb2.Envelope, bytes, int | None]]
                        ) -> list[Settled | None]:
    """Check, log and apply a bundle of one-way messages (receiver, envelope, payload, authenticated sender) in
    one pass and one group commit; per message its Settled, or None for one its kind's mailbox does not take at
    once (the caller hands it to `Receiver.accept`)."""
    taken: list[Taken | None] = []
    for receiver, envelope, data, sender in items:
        try:
            taken.append(receiver.take(envelope, data, sender))
        except Refusal as refusal:  # the node has stopped: nothing of it is logged any more
            taken.append(Taken((), refusal=refusal))
    # Like `Receiver.accept`, the commit is shielded from the caller's cancellation (a deadline, a sender that
    # died mid-call): a message whose record is being written is settled all the same, so its mailbox never
    # waits for it (a round barrier would wait forever for a value it was told is on its way to disk).
    commit = asyncio.ensure_future(_commit(items, taken))
    try:
        return await asyncio.shield(commit)
    except asyncio.CancelledError:
        commit.add_done_callback(_retrieved)
        raise


def _retrieved(commit: asyncio.Future[list[Settled | None]]) -> None:
    """Nobody awaits this commit any more: read its outcome so that a failure is not reported as unretrieved."""
    if not commit.cancelled():
        commit.exception()


async def _commit(items: Sequence[tuple[Receiver, peer_pb2.Envelope, bytes, int | None]],
                  taken: Sequence[Taken | None]) -> list[Settled | None]:
    """One group commit of the taken messages' records, then each settled: applied if logged, refused if not."""
    batches: dict[Journal, list[viewlog_pb2.Record]] = {}
    for (receiver, *_), took in zip(items, taken):
        if took is not None and took.records:
            batches.setdefault(receiver.journal, []).extend(took.records)
    failures = await write_view_logs(batches) if batches else {}
    settled: list[Settled | None] = []
    for (receiver, *_), took in zip(items, taken):
        if took is None:
            settled.append(None)
            continue
        logged = failures.get(receiver.journal) is None
        took.settle(logged)
        if not logged:
            settled.append(Settled(Refusal("UNAVAILABLE", "the receiving node could not log the message")))
        else:
            settled.append(TAKEN if took.refusal is None else Settled(took.refusal))
    return settled


async def accept_in_process(receiver: Receiver, envelope: peer_pb2.Envelope, data: bytes, sender: int,
                            timeout_s: float, *, call: bool) -> Reply:
    """One message to an id of this process through `Receiver.accept`, within the timeout; LinkError on refusal."""
    try:
        async with asyncio.timeout(timeout_s):  # no task of its own per message, unlike wait_for
            return await receiver.accept(envelope, data, sender, call=call)
    except Refusal as refusal:
        raise LinkError(refusal.code, refusal.detail) from None
    except TimeoutError:
        raise LinkError("DEADLINE_EXCEEDED", "peer did not answer in time") from None


@dataclass(slots=True)  # one per message: plain slots, no frozen set-up
class _Posted:
    receiver: Receiver
    envelope: peer_pb2.Envelope
    data: bytes
    timeout_s: float
    outcome: asyncio.Future[None]


class Courier:
    """The bundles of one process: one-way messages from its ids to ids it hosts, handed over a turn at a time.

    At most one bundle is in hand at once; what is sent meanwhile waits and goes in the next one
    (the group commit of the receiving logs grows with the load instead of queueing per message).
    """

    def __init__(self, receiver_of: Callable[[int], Receiver | None]) -> None:
        self._receiver_of = receiver_of
        self._waiting: list[_Posted] = []
        self._flusher: asyncio.Task[None] | None = None
        self._alone: set[asyncio.Task[None]] = set()  # messages handed to `Receiver.accept` on their own

    def post(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float) -> asyncio.Future[None] | None:
        """Put a one-way message in the next bundle; its future ends once the receiver durably logged it (LinkError:
        refused). None when its receiver is not hosted here (the caller sends it over its link)."""
        receiver = self._receiver_of(envelope.receiver)
        if receiver is None:
            return None
        loop = asyncio.get_running_loop()
        posted = _Posted(receiver, envelope, data, timeout_s, loop.create_future())
        self._waiting.append(posted)
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return posted.outcome

    def answers(self, peer: int) -> bool | None:
        """Whether `peer`, an id of this process, still takes messages: until its node stops (None: not hosted here)."""
        receiver = self._receiver_of(peer)
        return None if receiver is None else not receiver.journal.closed

    async def _flush(self) -> None:
        bundle: list[_Posted] = []
        try:
            await asyncio.sleep(0)  # the ids that run in this turn of the loop add theirs
            while self._waiting:
                bundle, self._waiting = self._waiting, []
                try:
                    await self._hand_over(bundle)
                except Exception as error:  # noqa: BLE001 - every sender of the bundle hears of it
                    _settle_all(bundle, error)
                bundle = []
        finally:
            self._flusher = None
            for posted in bundle + self._waiting:  # cancelled: the loop is closing
                posted.outcome.cancel()
            self._waiting = []

    async def _hand_over(self, bundle: list[_Posted]) -> None:
        settled = await accept_bundle([(p.receiver, p.envelope, p.data, int(p.envelope.sender)) for p in bundle])
        for posted, outcome in zip(bundle, settled):
            if outcome is None:
                task = asyncio.get_running_loop().create_task(self._accept_alone(posted))
                self._alone.add(task)
                task.add_done_callback(self._alone.discard)
            else:
                refusal = outcome.refusal
                _settle_all([posted], None if refusal is None else LinkError(refusal.code, refusal.detail))

    async def _accept_alone(self, posted: _Posted) -> None:
        try:
            await accept_in_process(posted.receiver, posted.envelope, posted.data, int(posted.envelope.sender),
                                    posted.timeout_s, call=False)
        except Exception as error:  # noqa: BLE001 - a LinkError, or what the receiver raised: its sender hears it
            _settle_all([posted], error)
        else:
            _settle_all([posted], None)


def _settle_all(bundle: Sequence[_Posted], error: Exception | None) -> None:
    """End each message's future (if its sender still waits) with `error`, or as delivered."""
    for posted in bundle:
        settle(posted.outcome, error)
