"""The exact column of a DECOR learning run: reachable-step composition with every step's joint Gaussian.

Muffliato-GD's exact column (`audit.reachable`) composes one Gaussian state per step of u that reaches
v's view, each at Δ/σ. In a DECOR run a step's states carry the pairwise draws too, and their noise is
correlated across the nodes of an edge, so the step is accounted as one release of every state it
adds to the view.

**Theorem** (joint-step composition). Under the conditions of `audit.reachable` (A1, A3, A4), with A2
read as: every step s, node w's state is θ_w − η (g_w + z_w + Σ_j s_wj v_(wj)), z_w ~ N(0, σ² I) fresh
and v_e ~ N(0, σ_cor² I) fresh per edge and step, both independent of the data. Let R_s be the nodes
outside the observer (or coalition) whose step-s state reaches some value v received, E' the edges
whose draw the observer does not hold (an external eavesdropper holds none), C the signed incidence
of R_s × E' and r = σ_cor/σ. Then v's view is μ-GDP for u with

    μ² = (Δ/σ)² Σ_{s : u ∈ R_s} [(I + r² C Cᵀ)⁻¹]_{uu}.

*Proof.* Let A be the model states in the causal past of v's view, as in `audit.reachable`. Given the
states before step s and the draws the observer holds (data-free: side information), the step-s
states of R_s are Gaussian with covariance η² σ² (I + r² C Cᵀ), independent of the data, and a
mean that differs between adjacent datasets by at most ηΔ in u's coordinate only (A1, A3): a Gaussian
mechanism of μ_s² = (Δ/σ)² e_uᵀ (I + r² C Cᵀ)⁻¹ e_u (per coordinate; the draws are independent across
coordinates). Draws are fresh every step, so adaptive composition (Dong, Roth & Su 2022, Cor. 3.3)
sums the μ_s²; the states of the observer's own nodes are known functions of earlier states, and
the gossip states functions of step states, so the view is a post-processing of A. ∎

Each step's factor lies in [0, 1] (I + r² C Cᵀ ≥ I), so the bound never exceeds Muffliato-GD's count of
reached steps; it equals it when every edge of u is known to the observer (r² C Cᵀ has no weight on
u). Against an eavesdropper with every state in view and large r, the factor tends to 1/n: central
DP's. The inverse of a matrix whose eigenvalues are at least 1 is computed to relative accuracy
cond · m · eps, which the factor is raised by (and capped at 1), so rounding never understates it.
"""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.core import EPS
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import UnrolledRun
from coordinator_tools.audit.views import coalition

THEOREM = ("joint-step composition: reachable-step composition (Mironov 2017 Prop. 1; Dong, Roth & Su 2022 "
           "Cor. 3.3) where each step's states that reach the view are one Gaussian release of covariance "
           "sigma^2 (I + r^2 C C^T), C the signed incidence of the edges whose draw the observer does not hold: "
           "mu^2 = (Delta/sigma)^2 sum over u's reached steps of [(I + r^2 C C^T)^-1]_uu")
CONDITIONS = (
    "A1: per-example clipping, so that at any model u's step gradient moves by at most Delta between adjacent "
    "datasets; the regulariser depends on no data",
    "A2: fresh independent N(0, sigma^2) noise per node and N(0, (r sigma)^2) pairwise noise per edge at every "
    "step, drawn independently of the data, the pairwise draw added at one end and subtracted at the other",
    "A3: a schedule (graph, drop-outs, batches, step size) independent of the data",
    "A4: the observer knows its own data and noise and every pairwise draw of its own edges; a coalition the "
    "union of its members'; an eavesdropper sees every message and holds no draw",
)


def step_geometry(run: UnrolledRun, edges: list[tuple[int, int]], ratio: float,
                  threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """q [u, v]: the σ-free factor (μ² = (Δ/σ)² q) of every pair's exact bound; NaN where u observes."""
    n = run.n
    factors = np.full((n, n), np.nan)
    if threat_model.eavesdropper:
        everything = _observer_factors(run, edges, ratio, tuple(range(len(run.messages))), ())
        for v in range(n):
            factors[:, v] = everything
            factors[v, v] = np.nan
        return factors
    for v in range(n):
        members = coalition(v, threat_model, n)
        rows = tuple(sorted({i for member in members for i in run.received[member]}))
        own = _observer_factors(run, edges, ratio, rows, members)
        sources = [u for u in range(n) if u not in members]
        factors[sources, v] = own[sources]
    return factors


def _observer_factors(run: UnrolledRun, edges: list[tuple[int, int]], ratio: float, rows: tuple[int, ...],
                      members: tuple[int, ...]) -> np.ndarray:
    """Σ_s [(I + r² C Cᵀ)⁻¹]_uu over u's reached steps, for every node u outside `members` (0 for the members)."""
    n, steps = run.n, run.steps
    reached = run.reached[list(rows)].any(axis=0).reshape(n, steps) if rows else np.zeros((n, steps), dtype=bool)
    reached[list(members)] = False
    unknown = [(i, j) for i, j in edges if i not in members and j not in members]
    incidence = np.zeros((n, len(unknown)))
    for k, (i, j) in enumerate(unknown):
        incidence[i, k], incidence[j, k] = 1.0, -1.0
    total = np.zeros(n)
    for s in range(steps):
        nodes = np.flatnonzero(reached[:, s])
        if nodes.size == 0:
            continue
        signs = incidence[nodes]
        covariance = np.eye(nodes.size) + ratio**2 * (signs @ signs.T)
        diagonal = np.diag(np.linalg.inv(covariance))
        slack = np.linalg.cond(covariance) * nodes.size * EPS
        total[nodes] += np.minimum(diagonal * (1.0 + slack) + slack, 1.0)
    return total
