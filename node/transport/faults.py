"""Fault injection for tests and experiments: answers the network loses after the request was handled.

The server consults one `LostAnswers` policy after the Receiver has handled a message (for a
delivery: after its mailbox logged it durably), and may then fail the call with UNAVAILABLE
instead of answering, as a network that drops the answer on its way back would. The sender
sees a failed attempt and retries; what the receiver did stays done. Two kinds of answer:

* the reply to a call (Call, CallStream): `netdp-node --fault-lose-replies`;
* the acknowledgement of a delivery (Deliver, Gossip): `netdp-node --fault-lose-acks`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

LOST_STATUS = "UNAVAILABLE"  # what the sender sees: the answer never came back over the connection


@dataclass(frozen=True)
class LostAnswers:
    """The share (0..1) of each kind of answer this node's server loses, drawn independently per answer."""

    replies: float = 0.0  # replies to calls
    acknowledgements: float = 0.0  # acknowledgements of deliveries
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("replies", "acknowledgements"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"the share of lost {name} must be in 0..1, not {getattr(self, name)}")

    @property
    def active(self) -> bool:
        return self.replies > 0.0 or self.acknowledgements > 0.0

    def lose_reply(self) -> bool:
        """Whether to lose the reply of a call that was handled."""
        return self.replies > 0.0 and self.rng.random() < self.replies

    def lose_acknowledgement(self) -> bool:
        """Whether to lose the acknowledgement of a delivery that was handled (logged)."""
        return self.acknowledgements > 0.0 and self.rng.random() < self.acknowledgements
