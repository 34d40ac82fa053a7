"""The exact column of a zero-sum learning run: composition over the shares of each step that reach the view.

A zero-sum learning node adds no noise of its own to its model: its values y_{u→j}^s = θ_u^{s+½} − η Z_{u→j}^s
carry shares that sum to zero with the one it keeps, so the kept share is a function of the values it sent
and its model after mixing is θ_u^{s+1} = κ_s θ_u^{s+½} + Σ_j (P_uj y_{j→u}^s − (κ_s W_uj) y_{u→j}^s), κ_s =
P_uu / W_uu (its realized self weight over its planned one, 1 without drop-out). The part κ_s θ_u^{s+½} is
hidden from every observer and carries every gradient u took: the states of `audit.reachable` are not
Gaussian given the past, so Muffliato-GD's and decor-gd's composition does not apply. What does:

**Theorem** (hidden-state share composition). Under CONDITIONS let A be the values in the causal closure of
the observer's view (the values it, or a member of its coalition, received; an eavesdropper: every value
received), closed by: a value node w sent at step s in A puts into A every value w sent or received before
step s. Let S_s ⊆ N(u) be the receivers of u's step-s values in A, ρ(S) = 1ᵀ Σ_S⁻¹ 1 with Σ_S the covariance
(in σ²) of the shares Z_{u→j}, j ∈ S (`zero_sum.share_release`), and

    f_0 = Δ,  f_s = |1 − ηλ| κ_{s−1} f_{s−1} + 2C.

Then the view is μ-GDP for u with μ² = Σ_s ρ(S_s) f_s² / σ².

*Proof.* Given A's values before step s, a value of w ≠ u at step s has a mean that is a function of them
and of w's data (w's model is κ θ_w^{s'+½} plus values in A, recursively), and noise drawn by w alone: it is
independent of u's data. u's step-s values in A share the mean m_s = θ_u^s − η g_u^s plus nothing else
that depends on u's data, with fresh noise η Z_{u→j}^s, Gaussian with covariance η² σ² Σ_S (per
coordinate, a nonsingular Σ_S as the kept share is never in S: it is never sent). Between adjacent
datasets, with the same values in A, m_s moves by at most η f_s: at s = 0 the models are equal (θ^0 = 0)
and the step gradients differ by at most Δ (A1); after, the hidden parts differ by κ_{s−1} η f_{s−1},
which the regulariser scales by 1 − ηλ, and the clipped data gradients, at different models, differ by at
most 2C (means of vectors of norm at most C). So step s is a Gaussian mechanism of μ_s² = ρ(S_s) f_s²/σ²,
adaptive composition (Dong, Roth & Su 2022, Cor. 3.3) sums them, and the view is a post-processing of A
with the observer's own data and draws (A4). ∎

The sensitivity f_s grows with s because u's gradients accumulate in its model and are never covered by
fresh noise of their own: the bound is far above decor-gd's or Muffliato-GD's at the same σ, and it is the
honest count of what zero-sum noise guarantees without further assumptions on the losses (a smooth convex
loss with a small step would keep f_s from growing as fast; netdp assumes neither).
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.core import EPS
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.protocols.zero_sum import share_covariance, share_release
from coordinator_tools.audit.views import coalition
from node.protocols.zero_sum_gd import ZeroSumGDParams

THEOREM = ("hidden-state share composition: adaptive composition (Dong, Roth & Su 2022 Cor. 3.3) over u's steps "
           "whose values reach the view's causal closure, step s a Gaussian release of u's hidden model at "
           "sensitivity f_s (f_0 = Delta, f_s = |1 - eta lambda| kappa f_(s-1) + 2C) through the shares in view: "
           "mu^2 = sum_s rho(S_s) f_s^2 / sigma^2, rho(S) = 1^T Sigma_S^-1 1")
CONDITIONS = (
    "A1: per-example clipping to C, so that at any model u's step gradient moves by at most Delta between "
    "adjacent datasets and its data part lies in the ball of radius C; the regulariser lambda theta depends on "
    "no data",
    "A2: fresh zero-sum shares every step, from draws N(0, sigma^2) independent of the data, weighted by the "
    "node's planned mixing row, the kept share included",
    "A3: a schedule (graph, drop-outs, batches, step size) independent of the data",
    "A4: the observer knows its own data and draws; a coalition the union of its members'; an eavesdropper sees "
    "every value sent and holds no draw",
)


def sensitivities(run: Transcript, params: ZeroSumGDParams, node: int) -> np.ndarray:
    """f_s / Δ for every step s of `node`: how far its step-s values' common mean can move, in units of Δ."""
    factors = np.ones(run.rounds)
    far = 2.0 * params.clip / params.sensitivity
    contraction = abs(1.0 - params.learning_rate * params.regularization)
    planned = run.topology.weight_row(node)[node]
    for s in range(1, run.rounds):
        mixed = s - 1 < run.completed_rounds(node)
        kappa = run.realized_row(node, s - 1)[node] / planned if mixed else 1.0
        factors[s] = contraction * kappa * factors[s - 1] + far
    return factors


def closure(run: Transcript, observers: tuple[int, ...], members: tuple[int, ...]) -> list[int]:
    """Per node outside `members`, the last step of a value of it in the causal closure of what `observers`
    received (−1: none): every value it sent or received before that step is in the closure too."""
    last = [-1] * run.n
    for observer in observers:
        for sender, step in run.received[observer]:
            if sender not in members:
                last[sender] = max(last[sender], step)
    changed = True
    while changed:
        changed = False
        for w in range(run.n):
            for x in run.topology.neighbours[w] if last[w] >= 1 else ():
                if x not in members and last[x] < last[w] - 1:
                    last[x], changed = last[w] - 1, True
    return last


def reached_receivers(run: Transcript, last: list[int], observers: tuple[int, ...], members: tuple[int, ...],
                      node: int) -> list[int]:
    """The receivers of `node`'s values of step last[node] in the closure: an observer that got it, or a node
    whose later value is in the closure (it mixed it)."""
    step = last[node]
    heard = {observer for observer in observers if (node, step) in run.received[observer]}
    mixed = {j for j in run.topology.neighbours[node] if j not in members and last[j] > step}
    return sorted((heard | mixed) & set(run.topology.neighbours[node]))


def source_factor(run: Transcript, params: ZeroSumGDParams, last: list[int], observers: tuple[int, ...],
                  members: tuple[int, ...], node: int) -> float:
    """Σ_s ρ(S_s) (f_s/Δ)² of one source: every value it sent before its last step in the closure, and those of
    that step that are in it."""
    if last[node] < 0:
        return 0.0
    row = run.topology.weight_row(node)
    factors = sensitivities(run, params, node)
    full = rounded_up_release(row, sorted(run.topology.neighbours[node]))
    final = rounded_up_release(row, reached_receivers(run, last, observers, members, node))
    return float(full * np.sum(np.square(factors[:last[node]])) + final * factors[last[node]] ** 2)


def rounded_up_release(row: dict[int, float], receivers: list[int]) -> float:
    """ρ(S) raised by its solve's relative error bound (cond · m · eps), so rounding never lowers the bound."""
    if not receivers:
        return 0.0
    slack = float(np.linalg.cond(share_covariance(row, receivers))) * len(receivers) * EPS
    return share_release(row, receivers) * (1.0 + slack)


def share_geometry(run: Transcript, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """q [u, v]: the σ-free factor (μ² = (Δ/σ)² q) of every pair's exact bound; NaN where u observes."""
    params = run.topology.protocol
    if not isinstance(params, ZeroSumGDParams):
        raise TypeError(f"a zero-sum-gd geometry of a topology running {params.name!r}")  # type: ignore[attr-defined]
    n = run.n
    factors = np.full((n, n), np.nan)
    if threat_model.eavesdropper:
        everyone = tuple(range(n))
        last = closure(run, everyone, ())
        column = np.array([source_factor(run, params, last, everyone, (), u) for u in range(n)])
        for v in range(n):
            factors[:, v] = column
            factors[v, v] = np.nan
        return factors
    for v in range(n):
        members = coalition(v, threat_model, n)
        last = closure(run, members, members)
        for u in range(n):
            if u not in members:
                factors[u, v] = source_factor(run, params, last, members, members, u)
    return factors
