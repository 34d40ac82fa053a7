"""The "paper" column of synchronous Muffliato: Theorem 1 evaluated on the realized schedule.

f(u, v) = αΔ²/(2σ²) · Σ_{(w, t) in v's view} (W_{0:t})²_{w,u} / ‖(W_{0:t})_w‖²,

with the plain products W_{0:t} = W_{t-1}…W_0 of the realized W_t, even for accelerated runs
(the paper treats acceleration as post-processing). It adds each message's marginal Gaussian
loss and ignores that all messages share the same noise, so it can fall below the exact loss
of the whole view: the report flags those pairs, it does not hide them.

Index note: the message x_w^t is (W_{0:t} z)_w, so u's coefficient is entry (w, u); the paper
writes (u, w), which is the same entry whenever the products are symmetric (fixed W, no
drop-outs). f is linear in α, so the theorem holds at every order with the same per-pair μ.
This is `audit.paper.message_share_sum` streamed round by round, so that the 2048-node
hypercube never holds more than one round of rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from coordinator_tools.audit.conversion import squared_mu
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.progress import tracked
from coordinator_tools.audit.protocols.muffliato.coefficients import float_rounds
from coordinator_tools.audit.protocols.muffliato.transcript import Message, Transcript
from coordinator_tools.audit.views import coalition


def message_sum(transcript: Transcript, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """Σ over v's messages of u's share of each message's noise: array [u, v], NaN where u observes.

    One sparse product per round (observers × senders indicator times the rows' shares), so
    the cost is O(T · n² · d), never a dense n³ product.
    """
    n = transcript.n
    coalitions = [coalition(v, threat_model, n) for v in range(n)]
    views = [{message for member in members for message in transcript.received[member]} for members in coalitions]
    indicators = _round_indicators(views, n, transcript.rounds)
    total = np.zeros((n, n))  # [v, u] while accumulating: rows are observers
    rounds = float_rounds(transcript, accelerated=False)
    for t, rows in enumerate(tracked(rounds, "paper: rounds", transcript.rounds)):
        share = np.square(rows)
        norms = share.sum(axis=1, keepdims=True)
        np.divide(share, norms, out=share, where=norms > 0)
        total += indicators[t] @ share
    result = total.T
    for v, members in enumerate(coalitions):
        result[list(members), v] = np.nan
    return result


def paper_mu(
    transcript: Transcript, *, sigma: float, sensitivity: float, threat_model: ThreatModel = ThreatModel()
) -> np.ndarray:
    """Thm 1 as a per-pair Gaussian parameter μ: f(u, v) = α μ²/2 at every order α."""
    return np.sqrt(squared_mu(message_sum(transcript, threat_model), sigma=sigma, sensitivity=sensitivity))


def _round_indicators(views: list[set[Message]], n: int, rounds: int) -> list[sp.csr_matrix]:
    """Per round t, the n×n 0/1 matrix [v, w] = 1 when x_w^t is in v's view."""
    entries: list[tuple[list[int], list[int]]] = [([], []) for _ in range(rounds)]
    for v, view in enumerate(views):
        for w, t in sorted(view, key=lambda message: (message[1], message[0])):
            entries[t][0].append(v)
            entries[t][1].append(w)
    return [
        sp.csr_matrix((np.ones(len(observers)), (observers, senders)), shape=(n, n))
        for observers, senders in entries
    ]
