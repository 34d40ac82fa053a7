"""What an observer saw and what it can subtract, under a threat model.

Every accountant (Thm 1, exact, attack) reads an observer's view through this module, so
"who observes", "which messages" and "which noise is unknown" are decided in one place.
With collusion, each member of the coalition is accounted as the coalition: one observer
whose view is the union of their views and who knows all of their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.transcript import Transcript

Message = tuple[int, int]  # (sender w, round t): the value x_w^t


@dataclass(frozen=True)
class ObserverView:
    """One observer's view of a synchronous gossip run of n nodes.

    ``messages`` are the distinct values received, sorted by round then sender.
    """

    observers: tuple[int, ...]
    messages: tuple[Message, ...]
    n: int
    knows_own_noise: bool

    @property
    def hidden(self) -> list[int]:
        """Columns of z = x + η the observer cannot subtract: all but its own if it knows its own
        noise, all of them if it knows only its own input (Muffliato Eq. 5)."""
        known = set(self.observers) if self.knows_own_noise else set()
        return [k for k in range(self.n) if k not in known]

    def sources(self) -> list[int]:
        """The nodes whose privacy this view is accounted for."""
        return [u for u in range(self.n) if u not in self.observers]

    def rows(self, history: np.ndarray) -> np.ndarray:
        """K: the view's float coefficient rows on the hidden columns.

        Each row is divided by the norm of the whole message row (never zero: rows sum to 1).
        Scaling a message does not change what it reveals, and rows of comparable size keep
        rank cut-offs about information rather than about how far gossip has shrunk a row.
        """
        full = history[[t for _, t in self.messages], [w for w, _ in self.messages]]
        return full[:, self.hidden] / np.linalg.norm(full, axis=1, keepdims=True)


def observer_view(transcript: Transcript, observer: int, threat_model: ThreatModel) -> ObserverView:
    """The view of `observer`, or of the coalition it belongs to."""
    n = transcript.n
    coalition = tuple(sorted(set(threat_model.collusion)))
    if any(not 0 <= member < n for member in coalition):
        raise ValueError(f"colluding observers {coalition} name a node outside 0..{n - 1}")
    observers = coalition if observer in coalition else (observer,)
    messages = sorted({message for member in observers for message in transcript.received[member]},
                      key=lambda message: (message[1], message[0]))
    return ObserverView(
        observers=observers, messages=tuple(messages), n=n, knows_own_noise=threat_model.observer_knows_own_noise
    )


def observer_views(transcript: Transcript, threat_model: ThreatModel) -> list[ObserverView]:
    """observer_view for every node v = 0..n-1 (column v of the pairwise arrays)."""
    return [observer_view(transcript, v, threat_model) for v in range(transcript.n)]
