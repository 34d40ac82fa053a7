"""The token slot: the tokens a node holds in custody during a walk (token walks, random-walk DP-SGD).

A token is a vector that one node holds at a time, named by its token id; its hop counts
the hand-overs so far, forwards and keeps (hop 0 where it is originated, so a forwarded
token carries hop ≥ 1).
A received token is logged, its payload and a `received` custody record durable together,
before the handler returns, that is before the sender's delivery is acknowledged: custody
passes only once the receiver holds the token durably. Under one lock, an incoming token is

* acknowledged again, not taken twice, when this node already took that (token id, hop) with
  the same payload (a retried forward whose acknowledgement was lost); another payload under
  a hop already taken is refused, and so logged with that payload;
* refused as stale when its hop is not newer than the last this node saw of the token,
  received or forwarded;
* refused when this node holds the token and has not forwarded it: one holder at a time;
* refused when the protocol's own `admit` rule says this sender may not pass this hop (a
  ring's order, a walk's length), before anything of it is logged as received.

The protocol `take`s a token, processes it and `forward`s it: custody is logged `forwarded`
before the delivery and `acknowledged` once the next holder has it. Until then the token
stays here, so a failed forward can be tried again, perhaps towards another peer. A walk
that draws its holder again `keep`s the token: the next hop is taken here, logged `kept`,
without a network hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from node.delivery import CustodyDelivery, Outbox
from node.journal import Delivery, Journal, received_record, token_record
from node.message import Message, MessageId
from node.refusal import Refusal

RECEIVED = "received"
FORWARDED = "forwarded"
ACKNOWLEDGED = "acknowledged"
KEPT = "kept"
# A protocol's rule for incoming tokens: (sender, or None in a sender-anonymous view; id) -> raise Refusal to refuse.
AdmitRule = Callable[[int | None, MessageId], None]


@dataclass(frozen=True)
class Token:
    """A token in this node's custody, as it arrived (or was originated)."""

    token_id: str
    hop: int
    value: np.ndarray
    sender: int | None  # None: originated here, or received sender-anonymously


class TokenSlot:
    """Custody of the tokens of one kind that walk through this node."""

    def __init__(self, kind: str, journal: Journal, outbox: Outbox, *, attempts: int,
                 admit: AdmitRule | None = None) -> None:
        self._kind = kind
        self._admit = admit
        self._journal = journal
        self._outbox = outbox
        self._delivery = CustodyDelivery(attempts)
        self._lock = asyncio.Lock()
        self._arrivals: asyncio.Queue[Token] = asyncio.Queue()
        self._held: dict[str, Token] = {}  # token id -> the token, in custody here and not in transit
        self._last_hop: dict[str, int] = {}  # token id -> the newest hop seen here, received or forwarded
        # (token id, hop) -> digest of the payload of every token logged as received
        self._taken: dict[tuple[str, int], bytes] = {}

    async def handle(self, sender: int | None, message: Message) -> None:
        """The mailbox's handler: take custody of a new hop, acknowledge a copy, refuse a stale one.

        `sender` is None when the receiver registered the kind sender-anonymous: nothing here names it then.
        """
        token_id, hop = message.id.token_id, message.id.hop
        if not token_id or hop == 0:
            raise Refusal("INVALID_ARGUMENT", "a forwarded token carries a token id and a hop from 1")
        if self._admit is not None:
            self._admit(sender, message.id)
        async with self._lock:
            taken = self._taken.get((token_id, hop))
            if taken == message.digest:
                return
            if taken is not None:
                raise Refusal("ALREADY_EXISTS", f"hop {hop} of the token was taken here with another payload")
            last = self._last_hop.get(token_id)
            if last is not None and hop <= last:
                # The details leave out the token id (the sender's, of any length; the rejected record has it).
                raise Refusal("FAILED_PRECONDITION", f"hop {hop} of the token is stale: hop {last} was here")
            if token_id in self._held:
                raise Refusal("FAILED_PRECONDITION", f"the token is in custody here at hop {self._held[token_id].hop}")
            await self._journal.write(received_record(sender, message), token_record(token_id, hop, RECEIVED, sender))
            token = Token(token_id, hop, message.payload, sender)
            self._taken[(token_id, hop)] = message.digest
            self._last_hop[token_id] = hop
            self._held[token_id] = token
            self._arrivals.put_nowait(token)

    async def take(self, timeout_s: float) -> Token | None:
        """The next token to arrive, in arrival order; None if none came within the timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self._arrivals.get()
        except TimeoutError:
            return None

    def originate(self, token_id: str, value: np.ndarray) -> Token:
        """Take custody of a new token whose walk starts here (hop 0: nothing was received)."""
        if token_id in self._last_hop:
            raise ValueError(f"token {token_id} has already been at this node")
        token = Token(token_id, 0, value, None)
        self._last_hop[token_id] = 0
        self._held[token_id] = token
        return token

    def holds(self, token: Token) -> bool:
        """Whether `token` is in custody here, not passed on (a failed forward may have reached the next holder)."""
        return self._held.get(token.token_id) is token

    async def keep(self, token: Token, value: np.ndarray) -> Token:
        """Take `token`'s next hop here, now carrying `value`: the walk drew this node again, custody stays."""
        if not self.holds(token):
            raise ValueError(f"token {token.token_id} at hop {token.hop} is not in custody here")
        kept = Token(token.token_id, token.hop + 1, value, None)
        self._last_hop[token.token_id] = kept.hop
        self._held[token.token_id] = kept
        await self._journal.write(token_record(kept.token_id, kept.hop, KEPT))
        return kept

    async def forward(self, peer: int, token: Token, value: np.ndarray, budget_s: float) -> Delivery:
        """Pass `token`, now carrying `value`, to `peer` as its next hop; it stays here unless `peer` acknowledges."""
        token_id = token.token_id
        if not self.holds(token):
            raise ValueError(f"token {token_id} at hop {token.hop} is not in custody here")
        hop = token.hop + 1
        del self._held[token_id]  # in transit: the next holder may send it back before its acknowledgement comes
        self._last_hop[token_id] = hop
        await self._journal.write(token_record(token_id, hop, FORWARDED, peer))
        message = Message(self._kind, MessageId(token_id=token_id, hop=hop), value)
        delivery = await self._outbox.deliver(peer, message, self._delivery, budget_s)
        if delivery.delivered:
            await self._journal.write(token_record(token_id, hop, ACKNOWLEDGED, peer))
        elif self._last_hop[token_id] == hop:  # nothing newer came back: the token is still ours
            self._held[token_id] = token
        return delivery
