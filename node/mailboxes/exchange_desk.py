"""The exchange desk: pairwise exchanges of a node's value, one at a time, atomic for both sides.

The desk holds the value being exchanged and the node's local sequence number. The commit
rule (initiator decides, presumed abort) is described in `node.protocols.muffliato_async`;
the desk is its implementation, and knows nothing of gRPC:

* as initiator, `initiate` waits until the desk is free, proposes, and on the peer's
  value logs `committed` (the commit point), applies `combine`, then delivers its decision;
* as responder, the handlers decline while the desk is busy, otherwise accept and wait
  (in doubt) for the initiator's decision; a responder left in doubt asks the initiator
  and aborts if it cannot be reached.

Every decision is idempotent by exchange id: a retried commit or abort changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from node.delivery import CustodyDelivery, Outbox
from node.journal import REPLY, Journal, exchange_record, received_record, sent_record
from node.message import Message, MessageId
from node.refusal import Refusal
from node.transport.base import LinkError

PROPOSE = "exchange.propose"  # Call, no payload
ACCEPT = "exchange.accept"  # reply, payload: the responder's value
DECLINE = "exchange.decline"  # reply, no payload
COMMIT = "exchange.commit"  # Deliver, payload: the initiator's value
ABORT = "exchange.abort"  # Deliver, no payload
STATUS = "exchange.status"  # Call, no payload; the reply's kind is the decision
COMMITTED = "exchange.committed"  # reply to STATUS, payload: the initiator's value before the exchange
ABORTED = "exchange.aborted"
PENDING = "exchange.pending"

Outcome = Literal["committed", "declined", "aborted"]
Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]
# Attempts at asking an unreachable initiator for its decision before the responder aborts.
STATUS_ATTEMPTS = 3


@dataclass(frozen=True)
class Pending:
    """An exchange this node accepted as responder and whose decision it awaits."""

    exchange_id: str
    initiator: int
    sequence: int


@dataclass(frozen=True)
class Decision:
    """What the initiator decided, kept to answer status questions."""

    committed: bool
    message_id: MessageId  # the initiator's sequence number and the exchange id
    value_before: np.ndarray  # the initiator's value that the peer averages with


class ExchangeDesk:
    """One node's side of every pairwise exchange it takes part in."""

    def __init__(self, node_id: int, combine: Combine, journal: Journal, outbox: Outbox, *,
                 timeout_s: float, attempts: int) -> None:
        self.node_id = node_id
        self.value: np.ndarray | None = None  # None until `open`: proposals are declined before
        self.sequence = 0
        self._combine = combine
        self._journal = journal
        self._outbox = outbox
        self._timeout_s = timeout_s
        self._delivery = CustodyDelivery(attempts)
        self._busy = asyncio.Lock()  # held by an initiator's whole exchange or a responder's doubt
        self._state = asyncio.Lock()  # guards the desk's records against concurrent handlers
        self._pending: Pending | None = None
        self._settled: dict[str, bool] = {}  # responder: exchange id -> committed?
        self._decisions: dict[str, Decision] = {}  # initiator: exchange id -> decision
        self._undecided: str | None = None  # initiator: the exchange awaiting its peer's answer
        self._doubt: asyncio.Task | None = None
        self.committed = self.declined = self.aborted = 0

    def open(self, value: np.ndarray) -> None:
        """Start exchanging `value` (the node's noisy input)."""
        self.value = value

    # --- initiator -----------------------------------------------------------------------

    async def initiate(self, peer: int, *, before: Callable[[], Awaitable[None]] | None = None) -> Outcome:
        """Exchange values with `peer` once the desk is free; `before` runs once it is held."""
        async with self._busy:
            if before is not None:
                await before()
            self.sequence += 1
            exchange_id = f"{self.node_id}-{self.sequence}"
            message_id = MessageId(sequence=self.sequence, exchange_id=exchange_id)
            self._undecided = exchange_id
            await self._journal.write(exchange_record(exchange_id, peer, self.sequence, "initiator", "proposed"))
            try:
                reply = await self._outbox.call(peer, Message(PROPOSE, message_id), self._timeout_s,
                                                reply_dimension=self.value.size)
            except LinkError as exc:
                return await self._abort(peer, message_id, f"no answer: {exc}")
            if reply.kind == DECLINE:
                self._decide(message_id, False)
                await self._journal.write(exchange_record(exchange_id, peer, self.sequence, "initiator", "declined"))
                self.declined += 1
                return "declined"
            if reply.kind != ACCEPT or reply.id.exchange_id != exchange_id or reply.payload.size != self.value.size:
                reason = f"unexpected answer {reply.kind!r} for exchange {reply.id.exchange_id!r}"
                await self._journal.refused_reply(peer, reply, reason)
                return await self._abort(peer, message_id, reason)
            before_value = self.value
            after = self._combine(before_value, reply.payload)
            await self._journal.write(
                received_record(peer, reply),
                exchange_record(exchange_id, peer, self.sequence, "initiator", "committed", value_after=after))
            self.value = after
            self.committed += 1
            self._decide(message_id, True, before_value)
            await self._outbox.deliver(peer, Message(COMMIT, message_id, before_value), self._delivery,
                                       self._timeout_s)
            return "committed"

    async def _abort(self, peer: int, message_id: MessageId, reason: str) -> Outcome:
        """Decide abort, log it, and tell the peer (it may have accepted and lost our answer)."""
        self._decide(message_id, False)
        await self._journal.write(
            exchange_record(message_id.exchange_id, peer, self.sequence, "initiator", "aborted", reason=reason))
        self.aborted += 1
        await self._outbox.deliver(peer, Message(ABORT, message_id), self._delivery, self._timeout_s)
        return "aborted"

    def _decide(self, message_id: MessageId, committed: bool, value_before: np.ndarray | None = None) -> None:
        self._decisions[message_id.exchange_id] = Decision(
            committed, message_id, np.zeros(0) if value_before is None else value_before)
        self._undecided = None

    async def answer_status(self, sender: int, message: Message) -> Message:
        """Handler of STATUS: this initiator's decision on one of its exchanges."""
        exchange_id = message.id.exchange_id
        decision = self._decisions.get(exchange_id)
        if decision is None:
            kind = PENDING if exchange_id == self._undecided else ABORTED  # never proposed: presumed abort
            return Message(kind, message.id)
        return Message(COMMITTED if decision.committed else ABORTED, decision.message_id,
                       decision.value_before if decision.committed else np.zeros(0))

    # --- responder -----------------------------------------------------------------------

    async def on_propose(self, sender: int, message: Message) -> Message:
        """Handler of PROPOSE: accept (reply with our value) or decline while busy."""
        exchange_id = message.id.exchange_id
        async with self._state:
            pending = self._pending
            if pending is not None and pending.exchange_id == exchange_id:  # a retried proposal
                return Message(ACCEPT, MessageId(sequence=pending.sequence, exchange_id=exchange_id), self.value)
            if exchange_id in self._settled:
                raise Refusal("ALREADY_EXISTS", f"exchange {exchange_id} is already settled here")
            if self._busy.locked() or self.value is None:
                reason = "not started yet" if self.value is None else "in another exchange"
                await self._journal.write(exchange_record(exchange_id, sender, 0, "responder", "declined",
                                                          reason=reason))
                self.declined += 1
                return Message(DECLINE, message.id)
            await self._busy.acquire()
            self.sequence += 1
            self._pending = Pending(exchange_id, sender, self.sequence)
            reply = Message(ACCEPT, MessageId(sequence=self.sequence, exchange_id=exchange_id), self.value)
            await self._journal.write(exchange_record(exchange_id, sender, self.sequence, "responder", "accepted"),
                                      sent_record(sender, reply, REPLY))
            self._doubt = asyncio.create_task(self._resolve_doubt(self._pending))
            return reply

    async def on_commit(self, sender: int, message: Message) -> None:
        """Handler of COMMIT: apply the average of the exchange we accepted."""
        await self._settle(sender, message, committed=True, reason="")

    async def on_abort(self, sender: int, message: Message) -> None:
        """Handler of ABORT: the initiator gave up; our value stays."""
        await self._settle(sender, message, committed=False, reason="the initiator aborted")

    async def _settle(self, sender: int, message: Message, *, committed: bool, reason: str) -> None:
        """Close the pending exchange once, as the initiator decided; later copies are refused."""
        exchange_id = message.id.exchange_id
        async with self._state:
            pending = self._pending
            if pending is None or pending.exchange_id != exchange_id or pending.initiator != sender:
                settled = self._settled.get(exchange_id)
                if settled is None and not committed:
                    return  # an abort of an exchange we never accepted: nothing to undo
                if settled is None or settled != committed:
                    raise Refusal("FAILED_PRECONDITION", f"exchange {exchange_id} is not pending here")
                raise Refusal("ALREADY_EXISTS", f"exchange {exchange_id} is already settled here")
            records = []
            after = None
            if committed:
                after = self._combine(self.value, message.payload)
                records.append(received_record(sender, message))
            records.append(exchange_record(exchange_id, sender, pending.sequence, "responder",
                                           "committed" if committed else "aborted", reason=reason,
                                           value_after=after))
            await self._journal.write(*records)
            if after is not None:
                self.value = after
            self._finish(pending, committed)

    def _finish(self, pending: Pending, committed: bool) -> None:
        self._settled[pending.exchange_id] = committed
        self._pending = None
        if committed:
            self.committed += 1
        else:
            self.aborted += 1
        if self._doubt is not None and self._doubt is not asyncio.current_task():
            self._doubt.cancel()
        self._doubt = None
        self._busy.release()

    async def _resolve_doubt(self, pending: Pending) -> None:
        """Ask the initiator for its decision if none came in time; abort if it cannot be reached."""
        failures = 0
        while True:
            await asyncio.sleep(2 * self._timeout_s)
            query = Message(STATUS, MessageId(sequence=pending.sequence, exchange_id=pending.exchange_id))
            try:
                answer = await self._outbox.call(pending.initiator, query, self._timeout_s,
                                                 reply_dimension=self.value.size)
            except LinkError as exc:
                failures += 1
                if failures < STATUS_ATTEMPTS:
                    continue
                answer = Message(ABORTED, query.id)
                reason = f"the initiator cannot be reached ({exc.code}); its decision is unknown"
            else:
                reason = "the initiator aborted"
            if answer.kind == PENDING:
                continue
            settle = Message(COMMIT if answer.kind == COMMITTED else ABORT, answer.id, answer.payload)
            try:
                await self._settle(pending.initiator, settle, committed=answer.kind == COMMITTED, reason=reason)
            except Refusal:
                pass  # the decision arrived meanwhile
            return

    async def drain(self) -> None:
        """Wait until no exchange is in doubt (before the node writes its output)."""
        async with self._busy:
            return
