"""The paper columns of a Muffliato-GD/SGD run: Thm 6 (Eq. 9), a corrected form, and where Eq. 9 undercounts.

All values are σ-free factors [u, v] in units of Δ²/σ² (RDP = α (Δ/σ)² · factor / 2, as
`accountants.account_model` reads its `paper_sum`; Δ is Thm 6's Δ_φ, the gradient sensitivity of
a Δ_φ/2-Lipschitz loss), NaN where u observes.

**Eq. 9** (fixed W, K ≥ 1 rounds per step, T steps, W^0 = I):

    ε^T_{u→v}(α) ≤ (T Δ_φ² α / 2σ²) Σ_{k=0}^{K−1} Σ_{w:{v,w}∈E} (W^k)²_{u,w} / ‖(W^k)_w‖².

On the realized schedule each step contributes its own term, summed over steps:
Σ_t Σ_{k<K_t} Σ_{w ∈ received[t][k][v]} (P_{t,k})²_{w,u} / ‖(P_{t,k})_w‖², P_{t,k} = W_{t,k−1}⋯W_{t,0},
which is T times the sum above on a fixed graph with every message delivered. (P)_{w,u}, u's
coefficient in w's message, is the paper's (W^k)_{u,w} for its symmetric W. Row w of P_{t,k} is
the slice of w's message on the step-t columns: Eq. 9 counts only the current step's gradient in
each message, so with K = 1 it gives 0 to every non-neighbour although u's noisy gradient
reaches v one step later (20-accounting.md, "The published learning bound undercounts too").

**Corrected** (20-accounting.md, fixed graph, K = 1):
min(T, Σ_{s=0}^{T−1} (T − s) Σ_{w∈N[v]} (W^s)²_{w,u} / ‖(W^s)_w‖²), N[v] = N(v) ∪ {v}. Generalised
here to realized runs with one round per step (per-step graphs, drop-outs): Σ over every step t,
every w ∈ N[v] and every step s ≤ t of u's share of the slice of θ_w^{t,0} on the step-s columns
(the realized product W_{t−1}⋯W_s), capped at T, with N[v] = v and every node v heard from at
any step of the run. On a fixed graph with every message delivered the slice is (W^{t−s})_w and
this is the spec's sum exactly. Counting only the senders heard at each step is *not* enough: on
the path 0–1–2 (row-normalised weights, T = 2), if node 1 misses θ_0^{0,0} that sum is 3/2 for
0 → 1 while the exact value is 9/5. The ever-heard form was ≥ exact on thousands of small random
instances with fixed or per-step graphs (evidence, not a proof), but drop-outs, which make
reception one-sided, can leave it slightly below exact (by ~1e-3 on rare 4–5-node instances):
label it `paper (corrected)` and flag it with `undercounted` like Eq. 9.
With K > 1 no share sum of this kind is a bound (a step is Muffliato averaging, Thm 1's case),
so the corrected form refuses such runs.

Shares do not depend on step sizes (each slice is scaled as a whole), so none are taken.
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.checks import ATOL, RTOL
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import Schedule, coefficients
from coordinator_tools.audit.views import coalition


def eq9_sum(schedule: Schedule, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """Thm 6 (Eq. 9) on the realized schedule, per step, summed over steps: [u, v]."""
    total = np.zeros((schedule.n, schedule.n))
    for t, k, current in coefficients(schedule):
        total += (_heard(schedule, t, k, threat_model) @ _shares(current)[:, :, t]).T
    return _mask(total, schedule.n, threat_model)


def corrected_sum(schedule: Schedule, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """The corrected closed form on the realized schedule, capped at the local-DP value T: [u, v].

    Needs one gossip round per step: with K > 1 a step is Muffliato averaging, whose share sum
    is not an upper bound (path 0–1–2, T = 1, K = 2: 1/3 for u = 0, v = 2, exact 1).
    """
    if any(len(maps) != 1 for maps in schedule.mixing):
        raise ValueError("the corrected form holds for one gossip round per step only")
    n = schedule.n
    closed = np.zeros((n, n))
    for v in range(n):
        closed[v, list(coalition(v, threat_model, n))] = 1.0
    for t in range(schedule.steps):
        closed = np.maximum(closed, _heard(schedule, t, 0, threat_model))
    total = np.zeros((n, n))
    for _, _, current in coefficients(schedule):
        total += (closed @ _shares(current).sum(axis=2)).T
    return _mask(np.minimum(total, schedule.steps), n, threat_model)


def undercounted(paper: np.ndarray, exact_lower: np.ndarray) -> np.ndarray:
    """[u, v]: the paper factor is below the exact one's lower end (as `checks.paper_undercounts`)."""
    with np.errstate(invalid="ignore"):
        return paper < exact_lower * (1.0 - RTOL) - ATOL


def _heard(schedule: Schedule, step: int, round_index: int, threat_model: ThreatModel) -> np.ndarray:
    """[v, w] = 1 where v's coalition received θ_w^{t,k}."""
    n = schedule.n
    senders = schedule.received[step][round_index]
    heard = np.zeros((n, n))
    for v in range(n):
        heard[v, list(set().union(*(senders[member] for member in coalition(v, threat_model, n))))] = 1.0
    return heard


def _shares(current: np.ndarray) -> np.ndarray:
    """[w, u, s]: u's share C²_{w,u,s} / Σ_u' C²_{w,u',s} of model w's slice on the step-s columns (0 if empty)."""
    squares = np.square(current)
    norms = squares.sum(axis=1, keepdims=True)
    return np.divide(squares, norms, out=np.zeros_like(squares), where=norms > 0)


def _mask(total: np.ndarray, n: int, threat_model: ThreatModel) -> np.ndarray:
    """NaN where u is (in the coalition of) the observer v."""
    for v in range(n):
        total[list(coalition(v, threat_model, n)), v] = np.nan
    return total
