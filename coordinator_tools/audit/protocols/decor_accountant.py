"""DECOR's SecLDP accountant (Allouah et al., ICML 2024, Theorem 1) as the audit's `paper` column.

SecLDP's adversary is an external eavesdropper who sees every message, or one curious user who
also holds the secrets on its own edges; users do not collude. Against it one Decor step releases,
for the honest users H (everyone the adversary is not), y_H = x_H + η_H + C_H v_H plus what the
adversary subtracts: a Gaussian of covariance σ² I + σ_cor² L_H, L_H the Laplacian of the graph H
induces. Replacing u's input by one at distance Δ costs α Δ²/2 · (Σ_H⁻¹)_uu at order α, and T
steps compose. Theorem 1 bounds (Σ_H⁻¹)_uu through the second-smallest eigenvalue a_H of L_H (the
algebraic connectivity; 0 when H is disconnected): every eigenvector but the constant one has
eigenvalue ≥ a_H, so

    (Σ_H⁻¹)_uu ≤ 1/(n_H σ²) + 1/(σ² + a_H σ_cor²),

and the column is f(u, v) = α T Δ²/2 · [1/(n_H σ²) + 1/(σ² + a_H σ_cor²)] in nats at every order
α (a Gaussian μ² = T Δ² [...]), the same for every source u of observer v: H is every node for the
eavesdropper, every node but v for a curious v. The paper's C-clipped gradients move by Δ = 2C.

Source. The theorem's own statement could not be read here (no copy of the paper's text was
reachable); the form above is checked against the authors' public accountant (github.com/
elfirdoussilab1/DECOR, utils/dp_account.py, `rdp_account`, the paper's Algorithm 2): one step
costs ρ = 2C² max_i (Σ⁻¹)_ii with Σ = σ² I + σ_cor² L, RDP α ρ at order α (α Δ²/2 (Σ⁻¹)_ii at
Δ = 2C), composed over T steps (`user_level_rdp`: ε = Tρ + 2√(Tρ log 1/δ), the conversion of αTρ).
That accountant inverts Σ on the whole graph; this column bounds the same diagonal entry on the
honest graph H from above through a_H, so it is never below the authors' value (a curious
observer's own edges' draws are known to it and leave L_H, not L), and its algebraic connectivity
is never overstated (`algebraic_connectivity`). When in doubt it reports more loss, not less.

The guarantee is the paper's exact algorithm's: D-SGD in which every step draws both noises, every
node completing every step, no coalition. A run outside it gets no value (`SecLdp.covers` is false
and `reason` says which condition failed): its exact column is computed all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from coordinator_tools.audit.core import EPS
from coordinator_tools.audit.losses import ThreatModel
from node.topology import Topology

THEOREM = ("DECOR (Allouah et al., ICML 2024) Thm 1, SecLDP: f(u, v) = alpha T Delta^2/2 [1/(n_H sigma^2) + "
           "1/(sigma^2 + a_H sigma_cor^2)], a_H the algebraic connectivity of the graph of the nodes the adversary "
           "is not (all n for an eavesdropper, all but v for a curious v), in nats at order alpha")
DENSE_NODES = 64  # larger graphs' algebraic connectivity by sparse Lanczos
LANCZOS_START_SEED = 0  # its start vector: any fixed generic vector makes every audit's value the same


@dataclass(frozen=True)
class Condition:
    """One condition of Theorem 1 and whether the run meets it."""

    name: str
    holds: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "holds": self.holds, "detail": self.detail}


@dataclass(frozen=True)
class SecLdp:
    """Theorem 1 on one run: its σ-free factor [u, v] (RDP = α (Δ/σ)² factor / 2) and the conditions it rests on."""

    factor: np.ndarray
    conditions: tuple[Condition, ...]

    @property
    def covers(self) -> bool:
        """Whether every condition holds: only then is the factor the paper's guarantee for this run."""
        return all(condition.holds for condition in self.conditions)

    @property
    def reason(self) -> str | None:
        """Why the theorem does not cover the run (its failed conditions), or None."""
        failed = [f"{condition.name} ({condition.detail})" for condition in self.conditions if not condition.holds]
        return "; ".join(failed) if failed else None

    def column(self) -> np.ndarray:
        """The paper column's factor: Theorem 1's where it covers the run, NaN everywhere where it does not."""
        return self.factor if self.covers else np.full(self.factor.shape, np.nan)

    def to_json(self, *, sigma: float, sensitivity: float, alpha: float) -> dict[str, object]:
        """The report's `decor.paper` block: the theorem, its conditions, and its value per observer in RDP."""
        observers = np.nanmax(self.factor, axis=0) if self.factor.size else np.zeros(0)
        scale = alpha * (sensitivity / sigma) ** 2 / 2.0
        return {"theorem": THEOREM, "covers": self.covers, "reason": self.reason,
                "conditions": [condition.to_json() for condition in self.conditions],
                "rdp_per_observer": [float(scale * value) for value in observers], "alpha": alpha,
                "units": "RDP at order alpha, nats, per pair (source u, observer v); the same for every source"}


def honest_factor(adjacency: np.ndarray, adversary: frozenset[int], *, steps: int, ratio: float) -> float:
    """T [1/n_H + 1/(1 + a_H r²)]: Theorem 1 at σ = 1 for the honest nodes H (those not in `adversary`), r = σ_cor/σ."""
    honest = [v for v in range(adjacency.shape[0]) if v not in adversary]
    if not honest:
        raise ValueError("Theorem 1 needs at least one node outside the adversary")
    return steps * (1.0 / len(honest) + 1.0 / (1.0 + algebraic_connectivity(adjacency[np.ix_(honest, honest)])
                                                 * ratio**2))


def algebraic_connectivity(adjacency: np.ndarray) -> float:
    """a(G): the second-smallest eigenvalue of the Laplacian of the graph `adjacency` gives; 0 for a disconnected
    graph or a single node.

    It is the smallest eigenvalue of L + 11ᵀ (the constant vector's 0 moves to n ≥ λ_max ≥ a), found by
    Lanczos on the sparse L beyond DENSE_NODES nodes (one per observer: n dense solves would be n⁴), from a
    fixed start (the same value every audit) and lowered by its Ritz pair's residual and the products' rounding:
    a Ritz value is never below the eigenvalue it approximates, and a larger a would understate the loss.
    """
    count = adjacency.shape[0]
    if count < 2:
        return 0.0
    laplacian = np.diag(adjacency.sum(axis=1)) - adjacency
    if count <= DENSE_NODES:
        return max(float(np.linalg.eigvalsh(laplacian)[1]), 0.0)
    sparse = scipy.sparse.csr_matrix(laplacian)
    shifted = scipy.sparse.linalg.LinearOperator((count, count), dtype=float,
                                                 matvec=lambda x: sparse @ x + np.sum(x, axis=0))
    start = np.random.default_rng(LANCZOS_START_SEED).standard_normal(count)
    values, vectors = scipy.sparse.linalg.eigsh(shifted, k=1, which="SA", tol=1e-12, v0=start)
    vector = vectors[:, 0]
    residual = float(np.linalg.norm(shifted @ vector - values[0] * vector) / np.linalg.norm(vector))
    rounding = count * EPS * (2.0 * float(np.max(adjacency.sum(axis=1))) + count)  # m eps ‖L + 11ᵀ‖ per product
    return max(float(values[0]) - residual - rounding, 0.0)


def secldp_factor(topology: Topology, threat_model: ThreatModel, *, steps: int, ratio: float) -> np.ndarray:
    """Theorem 1's σ-free factor [u, v] under `threat_model`, NaN on the diagonal (a coalition's adversary is
    the coalition: the value Theorem 1 would give, which it does not cover)."""
    n = topology.n
    adjacency = np.zeros((n, n))
    for v in range(n):
        adjacency[v, list(topology.neighbours[v])] = 1.0
    factor = np.empty((n, n))
    if threat_model.eavesdropper:
        factor[:] = honest_factor(adjacency, frozenset(), steps=steps, ratio=ratio)
    for v in range(n):
        if not threat_model.eavesdropper:
            members = frozenset(threat_model.collusion) if v in threat_model.collusion else frozenset({v})
            factor[:, v] = honest_factor(adjacency, members, steps=steps, ratio=ratio)
            factor[list(members), v] = np.nan
        factor[v, v] = np.nan
    return factor


def secldp(topology: Topology, threat_model: ThreatModel, *, steps: int, ratio: float,
           conditions: tuple[Condition, ...]) -> SecLdp:
    """Theorem 1 on a run of `topology`: the factor, and the conditions the caller established plus collusion."""
    coalition = Condition("no collusion", not threat_model.collusion,
                          "SecLDP's curious users do not collude" if not threat_model.collusion
                          else f"nodes {', '.join(map(str, threat_model.collusion))} pool every secret they hold")
    return SecLdp(secldp_factor(topology, threat_model, steps=steps, ratio=ratio), (*conditions, coalition))
