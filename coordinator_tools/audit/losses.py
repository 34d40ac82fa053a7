"""Per-pair privacy losses: the values every accountant fills and every report reads.

Units are explicit in the names: ``*_rdp`` is a Renyi divergence at order ``alpha``
(nats), ``*_eps`` an epsilon (nats) at ``delta``. Arrays are n x n and indexed
[source u, observer v]; the diagonal is meaningless and set to NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class ThreatModel:
    """Whose knowledge the numbers assume (recorded in every report)."""

    observer_knows_own_noise: bool = True
    graph_public: bool = True
    collusion: tuple[int, ...] = ()

    def describe(self) -> dict[str, object]:
        return {
            "notion": "pairwise network DP (Muffliato Def. 5), honest-but-curious observer",
            "observer_knows_own_value": True,
            "observer_knows_own_noise": self.observer_knows_own_noise,
            "graph_public": self.graph_public,
            "colluding_observers": list(self.collusion),
        }


@dataclass(frozen=True)
class PairColumn:
    """A protocol's own column beside the common ones, [u, v]: RDP at the report's α and ε at its δ."""

    rdp: np.ndarray
    eps: np.ndarray


@dataclass
class PairwiseLosses:
    """Every column of the report for every ordered pair (u -> v)."""

    alpha: float
    delta: float
    sigma: float
    sensitivity: float
    threat_model: ThreatModel
    # Muffliato Thm 1 on the realized schedule.
    paper_rdp: np.ndarray
    paper_eps: np.ndarray
    # Exact Gaussian divergence of v's whole view: [standard tolerance, near machine precision].
    exact_rdp: np.ndarray
    exact_eps: np.ndarray
    exact_rdp_upper: np.ndarray
    exact_eps_upper: np.ndarray
    reconstructable: np.ndarray  # bool: v can solve for u's noisy input exactly
    ill_conditioned: np.ndarray  # bool: the tolerance changed the answer
    exact_method: str  # "rational" or "float-interval"
    # Baselines at the same noise (ldp: the worst source's, where sources differ).
    ldp_rdp: float
    ldp_eps: float
    central_rdp: float
    central_eps: float
    # Distinguishing attack, only for the pairs it ran on: NaN elsewhere.
    empirical_eps_lower: np.ndarray | None = None
    # Replays per hypothesis of that attack (None: no replay attack, e.g. a canary audit's column).
    attack_runs: int | None = None
    # A protocol's corrected closed form, where it has one (Muffliato-GD: later steps counted).
    paper_corrected_rdp: np.ndarray | None = None
    paper_corrected_eps: np.ndarray | None = None
    # Where sources make different numbers of noisy contributions (token walks): each source u's own
    # local-DP loss, arrays [u]; None means every source has the baseline's.
    ldp_source_rdp: np.ndarray | None = None
    ldp_source_eps: np.ndarray | None = None
    # A protocol's own columns by report name (random-walk DP-SGD: realized_path, ex_ante); notes say what each is.
    columns: dict[str, PairColumn] = field(default_factory=dict)
    # Per-pair numbers that are not losses, [u, v] by column name of the pairs file (rw-sgd: the graph's
    # communicability expm(A), drawn beside its losses).
    facts: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return self.paper_rdp.shape[0]

    def ldp_pairs(self, unit: Literal["rdp", "eps"]) -> np.ndarray:
        """The local-DP loss of every pair [u, v]: what seeing all of u's noisy contributions reveals."""
        per_source = self.ldp_source_rdp if unit == "rdp" else self.ldp_source_eps
        value = np.asarray(per_source, dtype=float)[:, None] if per_source is not None else getattr(self, f"ldp_{unit}")
        return np.broadcast_to(value, (self.n, self.n)).astype(float)
