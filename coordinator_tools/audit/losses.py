"""Per-pair privacy losses: the values every accountant fills and every report reads.

Units are explicit in the names: ``*_rdp`` is a Renyi divergence at order ``alpha``
(nats), ``*_eps`` an epsilon (nats) at ``delta``. Arrays are n x n and indexed
[source u, observer v]; the diagonal is meaningless and set to NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from coordinator_tools.audit.conversion import Conversion

# Chosen on the command line (--threat-model); a coalition is the curious observer with --colluders.
THREAT_MODELS = ("curious-observer", "eavesdropper")


@dataclass(frozen=True)
class ThreatModel:
    """Whose knowledge the numbers assume (recorded in every report)."""

    observer_knows_own_noise: bool = True
    graph_public: bool = True
    collusion: tuple[int, ...] = ()
    eavesdropper: bool = False  # an outsider who sees every message and knows no draw, instead of a node

    def __post_init__(self) -> None:
        if self.eavesdropper and self.collusion:
            raise ValueError("an external eavesdropper colludes with no node; choose one threat model")

    @property
    def name(self) -> str:
        """The threat model's name on the command line and in reports."""
        if self.eavesdropper:
            return "eavesdropper"
        return "coalition" if self.collusion else "curious-observer"

    def describe(self) -> dict[str, object]:
        observer = ("external eavesdropper: every message of the run, no input, no draw" if self.eavesdropper
                    else "honest-but-curious observer")
        return {
            "name": self.name,
            "notion": f"pairwise network DP (Muffliato Def. 5), {observer}",
            "observer_knows_own_value": not self.eavesdropper,
            "observer_knows_own_noise": self.observer_knows_own_noise and not self.eavesdropper,
            "observer_knows_shared_draws": self.observer_knows_own_noise and not self.eavesdropper,
            "graph_public": self.graph_public,
            "colluding_observers": list(self.collusion),
        }


@dataclass(frozen=True)
class PairColumn:
    """A protocol's own column beside the common ones, [u, v]: RDP at the report's α and ε at its δ; an estimate
    (a Monte-Carlo mean) also has the upper end of its confidence interval, which a report leads with."""

    rdp: np.ndarray
    eps: np.ndarray
    rdp_upper: np.ndarray | None = None
    eps_upper: np.ndarray | None = None
    sampling: dict[str, object] | None = None  # an estimate's draws: how many, seed, confidence, the rule

    def units(self) -> dict[str, np.ndarray]:
        """The column's arrays by unit (`rdp`, `eps`, then the interval's ends where it has them)."""
        arrays = {"rdp": self.rdp, "eps": self.eps, "rdp_upper": self.rdp_upper, "eps_upper": self.eps_upper}
        return {unit: array for unit, array in arrays.items() if array is not None}


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
    # Exact Gaussian divergence of v's whole view, as an interval: the upper end is a proven bound (rounding and,
    # for many contributions, the worst case over their directions included), the lower end a value the view
    # reaches (standard rank tolerance; the best directions found). Reports lead with the upper end.
    exact_rdp_lower: np.ndarray
    exact_eps_lower: np.ndarray
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
    # The model attack, a self-check of the exact column: the audit's own linear-Gaussian model replayed with
    # fresh simulated noise (averaging) or simulated canaries (learning), only for the pairs it ran on: NaN elsewhere.
    model_attack_eps_lower: np.ndarray | None = None
    # Replays per hypothesis of that attack (None: no replay attack, e.g. the simulated canaries' column).
    attack_runs: int | None = None
    # The empirical column: the one-run canary audit of the real run (canaries planted by its nodes, scored from the
    # observers' logged views), only for the pairs it audited: NaN elsewhere; None when the run had no canaries.
    empirical_eps_lower: np.ndarray | None = None
    # A protocol's corrected closed form, where it has one (Muffliato-GD: later steps counted).
    paper_corrected_rdp: np.ndarray | None = None
    paper_corrected_eps: np.ndarray | None = None
    # How the paper columns' ε came from their per-pair μ (`conversion.Conversion`): "tight" is the exact
    # column's own profile (one basis), "paper" the paper's classic conversion; None where the closed form is
    # stated in (ε, δ) or its protocol converts it by its own rule.
    paper_conversion: Conversion | None = None
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
    # One line per column (paper, exact, ..., a protocol's own) saying what it is and what it is conditioned on,
    # for the report page; a protocol that gives none leaves the columns to `notes`.
    definitions: dict[str, str] = field(default_factory=dict)
    # What the exact column is conditioned on that the observer is not told (token walks: the path); None when it
    # is conditioned on what the observer knows only, so the paper bound and it are the same quantity.
    exact_given: str | None = None
    # True where the exact column is a proven upper bound that no view is shown to reach (learning runs: its lower
    # end is NaN): a closed form below it is then no evidence that the closed form undercounts.
    exact_is_bound: bool = False
    # The theorem the exact column rests on and its conditions, and what a column it is not is (learning runs:
    # {exact: {theorem, conditions}, linearized: {definition}}); None where the exact column needs none.
    assumptions: dict[str, object] | None = None

    @property
    def n(self) -> int:
        count: int = self.paper_rdp.shape[0]
        return count

    @property
    def exact_rdp(self) -> np.ndarray:
        """The exact loss in RDP as reports give it: the upper end of the interval."""
        return self.exact_rdp_upper

    @property
    def exact_eps(self) -> np.ndarray:
        """The exact loss in ε as reports give it: the upper end of the interval."""
        return self.exact_eps_upper

    def ldp_pairs(self, unit: Literal["rdp", "eps"]) -> np.ndarray:
        """The local-DP loss of every pair [u, v]: what seeing all of u's noisy contributions reveals."""
        per_source = self.ldp_source_rdp if unit == "rdp" else self.ldp_source_eps
        value = np.asarray(per_source, dtype=float)[:, None] if per_source is not None else getattr(self, f"ldp_{unit}")
        return np.broadcast_to(value, (self.n, self.n)).astype(float)
