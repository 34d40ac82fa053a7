"""A node's journal: turns protocol events into view-log records and makes them durable.

The public view log gets what the node saw; the private log gets its own input and noise.
Appends are fsync'd in worker threads so the event loop keeps serving peers meanwhile.
Records that must be durable together (a round's sent messages, a received value and the
exchange step it completes) are written with one `write` call: one fsync. Commits are
grouped, across every log of the process (`GroupCommit`): records handed in while a commit
is in flight (a round's values arriving from several neighbours at once, the sends of many
co-hosted ids) go out together in the next, one write and fsync per log, and each caller
returns only once its own records are on disk. Private records are held until the node's next
commit, public or private (`Journal.settled`): every send and reply waits for them, so a secret
is on disk before anything computed from it leaves the node, at no commit of its own. A
restarted node that rejoins its run (`resume`) appends to its existing logs once both are
checked (`read_resumable`), and its protocol reads the public one back from `resumed` (its host
the private one, from `resumed_private`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from netdp.v1 import peer_pb2, viewlog_pb2
from node.codec import to_tensor
from node.message import GOSSIP, Message, MessageId
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, LogContents, ViewLogWriter, read_resumable

REPLY_FAILURE = "reply"  # a sent record of a reply: its arrival is not observable by the sender
MAX_DETAIL_CHARS = 500  # a refusal's detail or an exchange's reason, cut: a peer's words must not grow the log
# A refused message's kind, exchange id or token id is logged as at most this many characters, then the
# SHA-256 of the rest: an oversized field is still told apart from another, but cannot grow the log.
MAX_LOGGED_FIELD_CHARS = 64
# Appends run on threads of their own: an fsync mostly waits for the disk, and the filesystem commits the
# fsyncs in flight together, so a few dozen at once (a round's logs of many ids in one process) cost little
# more than one; asyncio's default executor has only cores + 4 threads.
LOG_WRITER_THREADS = 32


@functools.cache
def log_writers() -> ThreadPoolExecutor:
    """The process-wide threads that write and fsync the logs (asked for from event loops only)."""
    return ThreadPoolExecutor(LOG_WRITER_THREADS, thread_name_prefix="netdp-log")


@dataclass(frozen=True)
class Delivery:
    """The fate of one message: delivered or not, after how many attempts, and why not."""

    delivered: bool
    attempts: int
    failure: str = ""
    unreachable: bool = False  # the last attempt found no connection to the peer at all
    peer_moved_on: bool = False  # the peer had closed the round without our value


REPLY = Delivery(False, 0, REPLY_FAILURE)  # what a reply's sent record says of its fate


def sent_record(peer: int, message: Message, delivery: Delivery) -> viewlog_pb2.Record:
    """A message this node sent, with the full-precision payload and its fate.

    Built in place (one record per message and peer: no sub-message is built apart and copied in)."""
    record = viewlog_pb2.Record()
    sent = record.sent
    sent.peer = peer
    if message.kind != GOSSIP:
        sent.kind = message.kind
    message.fill_tensor(sent.payload)
    sent.delivered, sent.attempts, sent.failure = delivery.delivered, delivery.attempts, delivery.failure
    message.id.fill(sent)
    return record


def sent_records(messages: Iterable[tuple[int, Message, Delivery]]) -> list[viewlog_pb2.Record]:
    """`sent_record` of each (peer, message, delivery); one message sent to many peers (a round's broadcast) is
    built once and copied for the others, with their peer and fate."""
    records: list[viewlog_pb2.Record] = []
    last: tuple[Message, viewlog_pb2.Record] | None = None
    for peer, message, delivery in messages:
        if last is None or last[0] is not message:
            record = sent_record(peer, message, delivery)
            last = (message, record)
        else:
            record = viewlog_pb2.Record()
            record.CopyFrom(last[1])
            sent = record.sent
            sent.peer = peer
            sent.delivered, sent.attempts, sent.failure = delivery.delivered, delivery.attempts, delivery.failure
        records.append(record)
    return records


def received_record(peer: int | None, message: Message) -> viewlog_pb2.Record:
    """A message this node received; `peer` None for a sender-anonymous view. Built in place, like `sent_record`."""
    record = viewlog_pb2.Record()
    received = record.received
    if peer is not None:
        received.peer = peer
    if message.kind != GOSSIP:
        received.kind = message.kind
    message.fill_tensor(received.payload)
    message.id.fill(received)
    return record


def exchange_record(exchange_id: str, peer: int, sequence: int, role: str, phase: str, *, reason: str = "",
                    value_after: np.ndarray | None = None) -> viewlog_pb2.Record:
    """One step of a pairwise exchange as this node saw it."""
    event = viewlog_pb2.ExchangeEvent(exchange_id=exchange_id, peer=peer, sequence=sequence, role=role,
                                      phase=phase, reason=reason[:MAX_DETAIL_CHARS])
    if value_after is not None:
        event.value_after.CopyFrom(to_tensor(value_after))
    return viewlog_pb2.Record(exchange=event)


def token_record(token_id: str, hop: int, phase: str, peer: int | None = None) -> viewlog_pb2.Record:
    """One change of a token's custody at this node; `peer` None for a sender-anonymous receive."""
    event = viewlog_pb2.TokenCustody(token_id=token_id, hop=hop, phase=phase)
    if peer is not None:
        event.peer = peer
    return viewlog_pb2.Record(token=event)


def refusal_record(claimed_sender: int, status_code: str, detail: str, kind: str, message_id: MessageId,
                   message: Message | None, kept_elements: int) -> viewlog_pb2.Record:
    """A refused message as logged: its first `kept_elements` payload elements (the protocol's dimension, so a
    valid payload is kept whole) and the SHA-256 of all of it, so a hostile payload cannot grow the log."""
    record = viewlog_pb2.Rejected(claimed_sender=claimed_sender, status_code=status_code,
                                  detail=detail[:MAX_DETAIL_CHARS], kind=bounded_text(kind))
    message_id.fill(record)
    record.exchange_id, record.token_id = bounded_text(record.exchange_id), bounded_text(record.token_id)
    if message is not None:
        payload = message.payload
        record.payload.CopyFrom(message.payload_tensor() if payload.size <= kept_elements
                                else to_tensor(payload.ravel()[:kept_elements]))
        record.payload_sha256 = message.digest
    return viewlog_pb2.Record(rejected=record)


def rejected_record(envelope: peer_pb2.Envelope | None, status_code: str, detail: str, message: Message | None,
                    *, kept_elements: int, anonymous: bool) -> viewlog_pb2.Record:
    """A refused incoming message: who claimed to send it (-1: unknown, or a sender-anonymous kind), which id, why,
    and, if it was read, its payload (bounded by `refusal_record`)."""
    sender = -1 if envelope is None or anonymous else int(envelope.sender)
    kind, message_id = ("", MessageId()) if envelope is None else (envelope.kind, MessageId.of(envelope))
    return refusal_record(sender, status_code, detail, kind, message_id, message, kept_elements)


def bounded_text(text: str) -> str:
    """`text` itself when short; else its first MAX_LOGGED_FIELD_CHARS characters, then `...sha256:` and the hex
    digest of the rest (so at most MAX_LOGGED_FIELD_CHARS + 74 characters)."""
    if len(text) <= MAX_LOGGED_FIELD_CHARS:
        return text
    rest = text[MAX_LOGGED_FIELD_CHARS:].encode("utf-8", errors="surrogatepass")
    return f"{text[:MAX_LOGGED_FIELD_CHARS]}...sha256:{hashlib.sha256(rest).hexdigest()}"


def _logged_kind(kind: str) -> str:
    """Gossip is logged with an empty kind, as version-1 logs were."""
    return "" if kind == GOSSIP else kind


class GroupCommit:
    """The appends of every log of a process (on one event loop), grouped: at most one commit in flight, and what
    is handed in meanwhile goes out together in the next, each log written once and fsync'd once, the writes of
    all its logs in flight at once (the filesystem commits concurrent fsyncs together). A round's records of many
    ids, sent and received, share commits instead of each log queueing its own."""

    def __init__(self) -> None:
        self._waiting: list[tuple[ViewLogWriter, Sequence[viewlog_pb2.Record], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    def submit(self, writer: ViewLogWriter, records: Sequence[viewlog_pb2.Record]) -> asyncio.Future[None]:
        """A future that ends once `records` are written to `writer`'s log, in order after every record handed in
        before, and fsync'd (or with the write's error)."""
        loop = asyncio.get_running_loop()
        durable = loop.create_future()
        self._waiting.append((writer, records, durable))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return durable

    async def _flush(self) -> None:
        """Write whatever is waiting, one write and fsync per log and group, until nothing is."""
        group: list[tuple[ViewLogWriter, Sequence[viewlog_pb2.Record], asyncio.Future[None]]] = []
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                by_log: dict[ViewLogWriter, list[viewlog_pb2.Record]] = {}
                for writer, records, _ in group:
                    by_log.setdefault(writer, []).extend(records)
                # One job per writer thread, each appending to its share of the logs in turn: as many fsyncs in
                # flight as with a job per log, without a job, a future and a wake-up of the loop per log.
                logs = list(by_log.items())
                shares = [logs[first::LOG_WRITER_THREADS] for first in range(min(LOG_WRITER_THREADS, len(logs)))]
                done = await asyncio.gather(*(loop.run_in_executor(log_writers(), _append_each, share)
                                              for share in shares))
                failures = {writer: failure for share, outcomes in zip(shares, done)
                            for (writer, _), failure in zip(share, outcomes)}
                for writer, _, durable in group:
                    if durable.done():  # its caller gave up waiting; the records went out all the same
                        continue
                    failure = failures[writer]
                    if failure is not None:  # every caller of that log's write hears of it
                        durable.set_exception(failure)
                    else:
                        durable.set_result(None)
                group = []
        finally:
            self._flusher = None
            for _, _, durable in group + self._waiting:  # cancelled itself: so are the appends it still owed
                durable.cancel()
            self._waiting = []


def _append_each(logs: Sequence[tuple[ViewLogWriter, Sequence[viewlog_pb2.Record]]]) -> list[Exception | None]:
    """Append and fsync each log's records, one log after another (a writer thread's share of a commit); per log,
    None once durable, else what failed (the others are written all the same)."""
    failures: list[Exception | None] = []
    for writer, records in logs:
        try:
            writer.append_many(records)
        except Exception as error:  # noqa: BLE001 - handed to that log's callers
            failures.append(error)
        else:
            failures.append(None)
    return failures


_commits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GroupCommit] = weakref.WeakKeyDictionary()


def group_commit() -> GroupCommit:
    """The running event loop's group commit, shared by every log its nodes write."""
    loop = asyncio.get_running_loop()
    commit = _commits.get(loop)
    if commit is None:
        commit = _commits[loop] = GroupCommit()
    return commit


class GroupedAppends:
    """One log's appends, through the group commit of the process: each returns once its records are durable."""

    def __init__(self, writer: ViewLogWriter) -> None:
        self._writer = writer

    async def append(self, records: Sequence[viewlog_pb2.Record]) -> None:
        """Return once `records` are written, in order after every record handed in before, and fsync'd."""
        await self.hand_in(records)

    def hand_in(self, records: Sequence[viewlog_pb2.Record]) -> asyncio.Future[None]:
        """`append` as the group commit's future: appends handed in in one turn of the loop share a commit."""
        return group_commit().submit(self._writer, records)


class Journal:
    """The two logs of one node for one run."""

    def __init__(self, log_dir: Path, header: viewlog_pb2.RunHeader, *, resume: bool = False) -> None:
        """`resume`: append to the logs already in `log_dir`, if any (a restarted node rejoining its run)."""
        self.log_dir = Path(log_dir)
        public = viewlog_pb2.RunHeader()
        public.CopyFrom(header)
        public.section = "public"
        public.started_unix = time.time()
        private = viewlog_pb2.RunHeader()
        private.CopyFrom(public)
        private.section = "private"
        view_path, private_path = self.log_dir / VIEW_LOG_NAME, self.log_dir / PRIVATE_LOG_NAME
        view_log = private_log = None
        if resume and view_path.exists() and view_path.stat().st_size > 0:
            # Both checked before either is touched: a refused restart leaves both logs as they were.
            view_log, private_log = read_resumable(view_path, public), read_resumable(private_path, private)
        # The public log read back at a restart, which the node rebuilds its state from; None on a fresh start.
        self.resumed: LogContents | None = None if view_log is None else view_log.contents
        # The private log read back at a restart: the canary signs it planted before (`node.canaries`).
        self.resumed_private: LogContents | None = None if private_log is None else private_log.contents
        self._view = ViewLogWriter(view_path, public, resume=view_log)
        self._private = ViewLogWriter(private_path, private, resume=private_log)
        self._closed = False
        self._view_appends = GroupedAppends(self._view)
        self._private_appends = GroupedAppends(self._private)
        # Private records the node has logged and not yet committed: they go out with its next commit (see
        # `settled`), so that a contribution, its noise and the record of its sending share one fsync.
        self._private_held: list[viewlog_pb2.Record] = []
        # The latest private commit handed in: the group commit writes in order, so once it is durable so is
        # every private record handed in before it.
        self._private_commit: asyncio.Future[None] | None = None

    async def write(self, *records: viewlog_pb2.Record) -> None:
        """Append public records, durable together (and with every private record logged before) before returning."""
        if not self._private_held:
            await self._view_appends.append(records)
            return
        private = self._hand_in_private()
        await asyncio.gather(asyncio.shield(private), self._view_appends.hand_in(records))

    async def settled(self) -> None:
        """Return once every private record logged so far is durable.

        A private record (an input, a noise draw) is held until the node's next commit, public or not;
        everything that carries what the node computed from its secrets waits here before it leaves the
        node (`Outbox` before a send, `Receiver` before a reply), so a record is never missing for a value
        that went out. A caller that comes while another's commit of them is in flight waits for that
        commit too. With nothing held or in flight this returns without yielding to the event loop.
        """
        if self._private_held:
            self._hand_in_private()
        if self._private_commit is not None:
            # Shielded: a caller that gives up does not cancel the commit the others wait for.
            await asyncio.shield(self._private_commit)

    def _hand_in_private(self) -> asyncio.Future[None]:
        """Hand the held private records to the group commit; the future of their commit."""
        held, self._private_held = self._private_held, []
        self._private_commit = self._private_appends.hand_in(held)
        return self._private_commit

    async def sent(self, messages: Iterable[tuple[int, Message, Delivery]]) -> None:
        """Messages and what became of each at its peer, made durable together."""
        await self.write(*sent_records(messages))

    async def received(self, peer: int | None, message: Message) -> None:
        await self.write(received_record(peer, message))

    async def drop_out(self, peer: int, round_index: int, reason: str) -> None:
        record = viewlog_pb2.DropOut(peer=peer, round=round_index, reason=reason)
        await self.write(viewlog_pb2.Record(drop_out=record))

    async def rejected(self, envelope: peer_pb2.Envelope | None, status_code: str, detail: str,
                       message: Message | None = None, *, kept_elements: int = 0, anonymous: bool = False) -> None:
        """A refused message, logged as `rejected_record` makes it."""
        await self.write(rejected_record(envelope, status_code, detail, message, kept_elements=kept_elements,
                                         anonymous=anonymous))

    async def refused_reply(self, peer: int, reply: Message, detail: str, *, kept_elements: int,
                            status_code: str = "INVALID_ARGUMENT") -> None:
        """A reply the protocol did not take: it reached the node, so it stays in the view with its payload."""
        await self.write(refusal_record(peer, status_code, detail, _logged_kind(reply.kind), reply.id, reply,
                                        kept_elements))

    async def final_output(self, value: np.ndarray, steps_completed: int) -> None:
        record = viewlog_pb2.FinalOutput(value=to_tensor(value), rounds_completed=steps_completed)
        await self.write(viewlog_pb2.Record(final_output=record))

    def private_input(self, value: np.ndarray, clipped: bool) -> None:
        """The node's input as it enters the protocol, private; committed with the node's next commit (`settled`)."""
        record = viewlog_pb2.PrivateInput(value=to_tensor(value), clipped=clipped)
        self._private_held.append(viewlog_pb2.Record(private_input=record))

    def canaries(self, signs: np.ndarray, magnitude: float) -> None:
        """The node's secret canary signs (an audit run), private like its noise."""
        record = viewlog_pb2.CanaryCoins(signs=to_tensor(signs), magnitude=magnitude)
        self._private_held.append(viewlog_pb2.Record(canaries=record))

    def noise(self, purpose: str, value: np.ndarray, *, step: int, mechanism: str, scale: float) -> None:
        """A noise draw (or another secret), private; committed with the node's next commit (`settled`)."""
        record = viewlog_pb2.NoiseDraw(purpose=purpose, value=to_tensor(value), step=step, mechanism=mechanism,
                                       scale=scale)
        self._private_held.append(viewlog_pb2.Record(noise=record))

    @property
    def view_writer(self) -> ViewLogWriter:
        """The public log's writer, for a caller that commits the records of many journals together."""
        return self._view

    @property
    def closed(self) -> bool:
        """Whether the node's run is over and its logs closed: nothing more can be recorded."""
        return self._closed

    def close(self) -> None:
        """Close both logs, committing the private records still held (a run that ended with nothing sent since)."""
        if self._private_held:
            self._private.append_many(self._private_held)
            self._private_held = []
        self._closed = True
        self._view.close()
        self._private.close()


async def write_view_logs(batches: Mapping[Journal, Sequence[viewlog_pb2.Record]]) -> dict[Journal, Exception | None]:
    """Append each journal's records to its view log in one group commit (a bundle of messages to many ids of one
    process). Per journal, None once its records are durable, else what failed (a closed log: the node stopped)."""
    commit = group_commit()
    journals = list(batches)
    outcomes = await asyncio.gather(*(commit.submit(journal.view_writer, batches[journal]) for journal in journals),
                                    return_exceptions=True)
    failures: dict[Journal, Exception | None] = {}
    for journal, outcome in zip(journals, outcomes):
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
        failures[journal] = outcome
    return failures
