"""The exchange desk: pairwise exchanges of a node's value, one at a time, atomic for both sides.

The desk holds the value being exchanged and the node's local sequence number. The commit
rule (initiator decides, presumed abort) is described in `node.protocols.muffliato_async`;
the desk is its implementation, and knows nothing of gRPC:

* as initiator, `initiate` waits until the desk is free, proposes, and on the peer's
  value logs `committed` (the commit point), applies `combine`, then delivers its decision;
* as responder, the handlers accept a proposal when the desk is free and wait (in doubt)
  for the initiator's decision; a responder left in doubt asks the initiator and aborts if
  it cannot be reached. A proposal to a busy desk waits for it a short while if it comes
  from a lower id, and is declined otherwise (or when the wait runs out): nodes that all
  tick fast are nearly always busy initiating, so declining every proposal to a busy desk
  would decline almost all of them, while waiting only up the order of ids can never
  close a cycle of nodes each waiting for the next.

Every decision is idempotent by exchange id: a retried commit or abort changes nothing.
An exchange id is "<initiator>-<initiator's sequence>", and every message of the exchange
carries that sequence: a proposal, commit or abort that does not is refused. A status
question is answered to the exchange's peer only, with what the exchange owes it (the
decision and, on a commit, the value the commit carries); anyone else is refused. Every
reply that leaves the desk is logged as sent before it leaves and as received (or refused)
where it arrives; a decision the desk cannot take (an abort of an exchange it never
accepted, a second commit) is refused, so the receiver logs it with its payload.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from netdp.v1 import viewlog_pb2
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
STATUS_ANSWERS = frozenset({COMMITTED, ABORTED, PENDING})  # each carries the exchange's MessageId

Outcome = Literal["committed", "declined", "aborted"]
Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]
# Attempts at asking an unreachable initiator for its decision before the responder aborts.
STATUS_ATTEMPTS = 3
# Of the initiator's timeout, how long a proposal may wait for a busy desk (from a lower id only) before it is
# declined: short enough that the initiator hears the answer long before it gives up.
PROPOSAL_WAIT_FRACTION = 0.25


def exchange_id_of(initiator: int, sequence: int) -> str:
    """The id of the exchange `initiator` proposes at its local `sequence`."""
    return f"{initiator}-{sequence}"


@dataclass(frozen=True)
class Pending:
    """An exchange this node accepted as responder and whose decision it awaits."""

    proposal: MessageId  # the initiator's sequence number and the exchange id
    initiator: int
    sequence: int  # this node's

    @property
    def exchange_id(self) -> str:
        return self.proposal.exchange_id


@dataclass(frozen=True)
class Decision:
    """Where an exchange this node proposed stands, kept to answer its peer's status questions."""

    peer: int
    message_id: MessageId  # the initiator's sequence number and the exchange id
    committed: bool | None = None  # None: the peer's answer is awaited
    value_before: np.ndarray = field(default_factory=lambda: np.zeros(0))  # what the peer averages with

    def answer(self) -> Message:
        """The reply to the peer's status question: the decision, with the value its commit carries."""
        if self.committed is None:
            return Message(PENDING, self.message_id)
        if not self.committed:
            return Message(ABORTED, self.message_id)
        return Message(COMMITTED, self.message_id, self.value_before)


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
        self._waiting: set[str] = set()  # proposals waiting for the desk, by exchange id
        self._settled: dict[str, bool] = {}  # responder: exchange id -> committed?
        self._decisions: dict[str, Decision] = {}  # initiator: exchange id -> where it stands
        self._doubt: asyncio.Task[None] | None = None
        # status questions asked, whose answers are still being taken
        self._questions: set[asyncio.Task[str | None]] = set()
        self.committed = self.declined = self.aborted = 0

    def open(self, value: np.ndarray) -> None:
        """Start exchanging `value` (the node's noisy input)."""
        self.value = value

    @property
    def opened_value(self) -> np.ndarray:
        """The value the desk holds now; only an opened desk has one."""
        if self.value is None:
            raise RuntimeError("the exchange desk has not been opened")
        return self.value

    # --- initiator -----------------------------------------------------------------------

    async def initiate(self, peer: int, *, before: Callable[[], Awaitable[None]] | None = None) -> Outcome:
        """Exchange values with `peer` once the desk is free; `before` runs once it is held."""
        async with self._busy:
            if before is not None:
                await before()
            self.sequence += 1
            exchange_id = exchange_id_of(self.node_id, self.sequence)
            message_id = MessageId(sequence=self.sequence, exchange_id=exchange_id)
            self._decisions[exchange_id] = Decision(peer, message_id)
            await self._journal.write(exchange_record(exchange_id, peer, self.sequence, "initiator", "proposed"))
            try:
                reply = await self._outbox.call(peer, Message(PROPOSE, message_id), self._timeout_s,
                                                reply_dimension=self.opened_value.size)
            except LinkError as exc:
                return await self._abort(peer, message_id, f"no answer: {exc}")
            if not _answers(reply, message_id, self.opened_value.size):
                reason = f"unexpected answer {reply.kind!r} for exchange {reply.id.exchange_id!r}"
                await self._journal.refused_reply(peer, reply, reason, kept_elements=self.opened_value.size)
                return await self._abort(peer, message_id, reason)
            if reply.kind == DECLINE:
                self._decide(exchange_id, False)
                await self._journal.write(exchange_record(exchange_id, peer, self.sequence, "initiator", "declined"))
                self.declined += 1
                return "declined"
            before_value = self.opened_value
            after = self._combine(before_value, reply.payload)
            await self._journal.write(
                received_record(peer, reply),
                exchange_record(exchange_id, peer, self.sequence, "initiator", "committed", value_after=after))
            self.value = after
            self.committed += 1
            self._decide(exchange_id, True, before_value)
            await self._outbox.deliver(peer, Message(COMMIT, message_id, before_value), self._delivery,
                                       self._timeout_s)
            return "committed"

    async def _abort(self, peer: int, message_id: MessageId, reason: str) -> Outcome:
        """Decide abort, log it, and tell the peer (it may have accepted and lost our answer)."""
        self._decide(message_id.exchange_id, False)
        await self._journal.write(
            exchange_record(message_id.exchange_id, peer, self.sequence, "initiator", "aborted", reason=reason))
        self.aborted += 1
        await self._outbox.deliver(peer, Message(ABORT, message_id), self._delivery, self._timeout_s)
        return "aborted"

    def _decide(self, exchange_id: str, committed: bool, value_before: np.ndarray | None = None) -> None:
        decision = self._decisions[exchange_id]
        self._decisions[exchange_id] = replace(
            decision, committed=committed, value_before=np.zeros(0) if value_before is None else value_before)

    async def answer_status(self, sender: int, message: Message) -> Message:
        """Handler of STATUS: this initiator's decision on an exchange it proposed to the asker.

        The answer carries nothing the asker's own exchange does not owe it, and is logged as sent
        before it leaves; a question about anybody else's exchange is refused.
        """
        decision = self._decisions.get(message.id.exchange_id)
        if decision is None or decision.peer != sender:
            raise Refusal("PERMISSION_DENIED", f"node {sender} asks about an exchange this node did not propose "
                                               "to it", names_sender=True)
        answer = decision.answer()
        await self._journal.write(sent_record(sender, answer, REPLY))
        return answer

    # --- responder -----------------------------------------------------------------------

    async def on_propose(self, sender: int, message: Message) -> Message:
        """Handler of PROPOSE: accept (reply with our value) once the desk is ours, or decline while busy."""
        exchange_id = message.id.exchange_id
        if exchange_id != exchange_id_of(sender, message.id.sequence):
            raise Refusal("INVALID_ARGUMENT", f"a proposal of node {sender} at its sequence {message.id.sequence} "
                                              f"is exchange {exchange_id_of(sender, message.id.sequence)!r}",
                          names_sender=True)
        async with self._state:
            pending = self._pending
            if pending is not None and pending.exchange_id == exchange_id:  # a retried proposal
                reply = Message(ACCEPT, MessageId(sequence=pending.sequence, exchange_id=exchange_id),
                                self.opened_value)
                await self._journal.write(sent_record(sender, reply, REPLY))
                return reply
            if exchange_id in self._settled:
                raise Refusal("ALREADY_EXISTS", f"exchange {exchange_id} is already settled here")
            if self.value is None:
                return await self._decline(sender, message, "not started yet")
            if exchange_id in self._waiting or self._busy.locked() and sender > self.node_id:
                return await self._decline(sender, message, "in another exchange")
            self._waiting.add(exchange_id)
        try:  # outside the state lock: the exchange that holds the desk must be able to settle meanwhile
            held = await self._wait_for_desk()
        finally:
            self._waiting.discard(exchange_id)
        try:
            await self._state.acquire()
        except asyncio.CancelledError:
            if held:
                self._busy.release()
            raise
        try:
            if not held:
                return await self._decline(sender, message, "in another exchange")
            return await self._accept(sender, message)
        finally:
            self._state.release()

    async def _wait_for_desk(self) -> bool:
        """Take the desk for a proposal if it frees within a fraction of the initiator's timeout."""
        try:
            return await asyncio.wait_for(self._busy.acquire(), self._timeout_s * PROPOSAL_WAIT_FRACTION)
        except TimeoutError:
            return False

    async def _decline(self, sender: int, message: Message, reason: str) -> Message:
        """Log and answer a declined proposal (under the state lock)."""
        await self._journal.write(exchange_record(message.id.exchange_id, sender, 0, "responder", "declined",
                                                  reason=reason))
        self.declined += 1
        return Message(DECLINE, message.id)

    async def _accept(self, sender: int, message: Message) -> Message:
        """Accept a proposal once the desk is held for it: reply with our value and await the decision (under
        the state lock). The doubt is watched from the start, so a desk left by a cancelled reply frees itself."""
        exchange_id = message.id.exchange_id
        self.sequence += 1
        self._pending = Pending(message.id, sender, self.sequence)
        self._doubt = asyncio.create_task(self._resolve_doubt(self._pending))
        reply = Message(ACCEPT, MessageId(sequence=self.sequence, exchange_id=exchange_id), self.opened_value)
        await self._journal.write(exchange_record(exchange_id, sender, self.sequence, "responder", "accepted"),
                                  sent_record(sender, reply, REPLY))
        return reply

    async def on_commit(self, sender: int, message: Message) -> None:
        """Handler of COMMIT: apply the average of the exchange we accepted."""
        await self._settle(sender, message, reason="")

    async def on_abort(self, sender: int, message: Message) -> None:
        """Handler of ABORT: the initiator gave up; our value stays."""
        await self._settle(sender, message, reason="the initiator aborted")

    async def _settle(self, sender: int, message: Message, *, reason: str) -> None:
        """Close the pending exchange once, as the initiator decided: `message` is its delivered decision or its
        answer to our status question (logged as received). Anything else is refused."""
        async with self._state:
            pending = self._pending
            refusal = self._refusal(pending, sender, message)
            if refusal is not None:
                raise refusal
            assert pending is not None  # `_refusal` lets through only a decision on the pending exchange
            committed = message.kind in (COMMIT, COMMITTED)
            logged = [received_record(sender, message)] if committed or message.kind in STATUS_ANSWERS else []
            await self._close(pending, message.payload if committed else None, reason, logged)

    def _refusal(self, pending: Pending | None, sender: int, message: Message) -> Refusal | None:
        """Why `message` cannot settle the pending exchange, or None."""
        exchange_id = message.id.exchange_id
        if pending is not None and pending.exchange_id == exchange_id and pending.initiator == sender:
            if message.id.sequence != pending.proposal.sequence:
                return Refusal("INVALID_ARGUMENT", f"the decision on exchange {exchange_id} carries initiator "
                                                   f"sequence {message.id.sequence}, its proposal "
                                                   f"{pending.proposal.sequence}")
            return None
        settled = self._settled.get(exchange_id)
        if settled is None or settled != (message.kind in (COMMIT, COMMITTED)):
            return Refusal("FAILED_PRECONDITION", f"exchange {exchange_id} is not pending here")
        return Refusal("ALREADY_EXISTS", f"exchange {exchange_id} is already settled here")

    async def _close(self, pending: Pending, initiator_value: np.ndarray | None, reason: str,
                     logged: list[viewlog_pb2.Record]) -> None:
        """Log and apply the decision on `pending` (committed: `initiator_value` given), under the state lock."""
        after = None if initiator_value is None else self._combine(self.opened_value, initiator_value)
        await self._journal.write(*logged, exchange_record(
            pending.exchange_id, pending.initiator, pending.sequence, "responder",
            "aborted" if after is None else "committed", reason=reason, value_after=after))
        if after is not None:
            self.value = after
        self._finish(pending, after is not None)

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
        """Ask the initiator for its decision if none came in time; abort if it cannot be reached.

        An initiator that gives no usable answer is asked again, up to STATUS_ATTEMPTS times; one
        still undecided, until it decides. Asking is shielded from this task's cancellation (the
        decision itself arrived): an answer on its way is still logged.
        """
        failures, failure = 0, ""
        while failures < STATUS_ATTEMPTS:
            await asyncio.sleep(2 * self._timeout_s)
            question = asyncio.ensure_future(self._ask(pending))
            self._questions.add(question)
            question.add_done_callback(self._questions.discard)
            answer = await asyncio.shield(question)
            if answer is None:
                return
            failure = answer
            failures += bool(failure)
        async with self._state:
            if self._pending is pending:
                await self._close(pending, None, failure, [])

    async def _ask(self, pending: Pending) -> str | None:
        """Ask the initiator once and take its answer, which is logged whatever becomes of it: received, or
        refused (malformed, or after the decision itself came). None once the exchange is settled; else why
        not: "" while the initiator is undecided, or why no usable answer came."""
        initiator, dimension = pending.initiator, self.opened_value.size
        query = Message(STATUS, MessageId(sequence=pending.sequence, exchange_id=pending.exchange_id))
        try:
            answer = await self._outbox.call(initiator, query, self._timeout_s, reply_dimension=dimension)
        except LinkError as exc:
            return f"the initiator cannot be reached ({exc.code}); its decision is unknown"
        if not _answers_status(answer, pending, dimension):
            failure = f"the initiator's answer {answer.kind!r} to the status question is refused"
            await self._journal.refused_reply(initiator, answer, failure, kept_elements=dimension)
            return failure
        if answer.kind == PENDING:
            await self._journal.write(received_record(initiator, answer))
            return ""
        try:
            await self._settle(initiator, answer, reason="the initiator aborted")
        except Refusal as refusal:  # the decision arrived meanwhile
            await self._journal.refused_reply(initiator, answer, refusal.detail, kept_elements=dimension,
                                              status_code=refusal.code)
        return None

    async def drain(self) -> None:
        """Wait until no exchange is in doubt and every answer to a status question is logged (before the node
        writes its output)."""
        async with self._busy:
            pass
        await asyncio.gather(*self._questions)


def _answers(reply: Message, proposal: MessageId, dimension: int) -> bool:
    """Whether `reply` declines `proposal` or accepts it (with the responder's value and sequence number)."""
    if reply.id.exchange_id != proposal.exchange_id:
        return False
    if reply.kind == DECLINE:
        return reply.payload.size == 0
    return reply.kind == ACCEPT and reply.payload.size == dimension and reply.id.sequence >= 1


def _answers_status(answer: Message, pending: Pending, dimension: int) -> bool:
    """Whether `answer` is the initiator's decision on `pending`: its id, and the value only with a commit."""
    return (answer.kind in STATUS_ANSWERS and answer.id == pending.proposal
            and answer.payload.size == (dimension if answer.kind == COMMITTED else 0))
