"""The paper column of the token walks: PAbD Thm 1 (ring), Thm 2 (ring histogram), Thm 3 (walk), as stated.

Both theorems start from the (ε, δ)-LDP guarantee of one Perturb(x; σ_loc) and state one
(ε', δ') network-DP guarantee for every pair, so the column is the same ε' for every pair at
the report's δ, with no RDP (the theorems state none). Perturb is the Gaussian mechanism at
σ and sensitivity Δ; its (ε, δ) pairs are read off its exact privacy profile (any ε > 0,
not the classic calibration that needs ε < 1). The report's δ is split between the
theorem's δ terms to make ε' smallest, on a grid, and the split is reported:

* Thm 1 (Alg. 1): ε' = √(2K ln(1/δ')) ε + K ε(e^ε − 1) at δ_total = Kδ + δ';
* Thm 2 (Alg. 2): the same composition, from the (ε, δ) each window between two visits gets by
  shuffling: RR_γ is ε₀-LDP, ε₀ = ln(1 + L(1−γ)/γ), so inverting Thm 2's calibration
  ε₀ = 12 ε √(ln(1/δ)/n) gives ε = ε₀ / (12 √(ln(1/δ)/n)) at each split's δ;
* Thm 3 (Alg. 3): ε' = √(2N ln(1/δ')) ε₁ + 2√(2Nγ ln(1/δ')) ε + N ε₁(e^{ε₁} − 1) + 4Nγ ε(e^ε − 1),
  ε₁ = √2 ε / n^{1/4}, N = T/n + √((3/2) T ln(1/δ̂)), γ = 1 − (1 − 1/n)^{√n/2}, at
  δ_total = (T/n) δ + δ' + δ̂.

Each theorem's conditions are checked and reported, with the observers where one fails: the
stated ones (ε, δ > 0: σ > 0), the setting it is proven for (Alg. 1's single placement; no
collusion) and the view it bounds (the K token values of Eq. 4, the visits of Eq. 5, with
Thm 3's N visits): the result that every node but the last holder receives is outside both
views, so pairs it reveals are where the bound can undercount.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from coordinator_tools.audit.accountants import ClosedForm
from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from coordinator_tools.audit.report import json_number
from node.protocols import ring_histogram, ring_sum

# Fractions of the report's δ tried for each of a theorem's δ terms (the rest goes to the others).
SPLIT_GRID = np.linspace(0.02, 0.98, 49)


@dataclass(frozen=True)
class Condition:
    """One condition of a theorem: whether it holds for this run, and where not."""

    name: str
    holds: bool
    detail: str


@dataclass(frozen=True)
class PaperBound:
    """A theorem's ε' for every pair at the report's δ, how δ was split, and its conditions."""

    theorem: str
    epsilon: float
    split: dict[str, float]  # the per-visit (epsilon, delta) of Perturb and the theorem's other terms
    conditions: tuple[Condition, ...]

    def column(self, n: int) -> ClosedForm:
        """The paper column: ε' for every pair, no RDP."""
        eps = np.full((n, n), self.epsilon)
        np.fill_diagonal(eps, np.nan)
        return ClosedForm(rdp=np.full((n, n), np.nan), eps=eps)

    def failing(self) -> list[Condition]:
        return [condition for condition in self.conditions if not condition.holds]

    def to_json(self) -> dict[str, object]:
        return {"theorem": self.theorem, "eps": json_number(self.epsilon),
                "split": {name: json_number(value) for name, value in self.split.items()},
                "conditions": [asdict(condition) for condition in self.conditions]}


def paper_bound(run: TokenRun, *, sigma: float, sensitivity: float, delta: float, threat_model: ThreatModel,
                realized: bool = True) -> PaperBound:
    """The theorem of `run`'s protocol; `realized` False for a walk planned ex ante (visits not known yet)."""
    mu = math.inf if sigma == 0 else sensitivity / sigma
    common = [_positive(sigma), _view_condition(run), _collusion(threat_model)]
    if run.protocol == ring_sum.PROTOCOL_NAME:
        params = run.topology.protocol
        epsilon, split = ring_theorem(mu, cycles=params.cycles, delta=delta)
        placement = Condition("single placement (Alg. 1)", params.noise_placement == "single",
                              "Thm 1 is proven for Alg. 1; Remark 1's distributed noise has no theorem of its own"
                              if params.noise_placement == "distributed" else "noise every n - 1 hops")
        return PaperBound("PAbD Thm 1 (ring real summation)", epsilon, split, (*common, placement))
    if run.protocol == ring_histogram.PROTOCOL_NAME:
        params = run.topology.protocol
        local = ring_histogram.rr_epsilon(params.gamma, params.categories)
        epsilon, split = histogram_theorem(local, n=run.n, cycles=params.cycles, delta=delta)
        stated = tuple(Condition(f"Thm 2: {c.name}", c.holds, c.detail) for c in
                       ring_histogram.thm2_conditions(run.n, split["window_eps"], split["window_delta"]))
        randomized = Condition("gamma > 0 (stated: epsilon finite)", params.gamma > 0,
                               "RR_gamma answers at random with probability gamma > 0" if params.gamma > 0 else
                               "gamma = 0: every answer is the truth, the bound is infinite")
        return PaperBound("PAbD Thm 2 (ring histogram)", epsilon, split,
                          (randomized, *stated, common[1], common[2]))
    steps = run.topology.protocol.steps
    epsilon, split = walk_theorem(mu, steps=steps, n=run.n, delta=delta)
    return PaperBound("PAbD Thm 3 (complete-graph walk real summation)", epsilon, split,
                      (*common, _visits_condition(run, split["N_v"], realized)))


def ring_theorem(mu: float, *, cycles: int, delta: float) -> tuple[float, dict[str, float]]:
    """Thm 1's smallest ε' at δ_total = Kδ + δ', over the split grid, and that split."""
    return _advanced_composition(lambda per_visit: float(gaussian_epsilon(mu, per_visit)), cycles=cycles,
                                 delta=delta, names=("perturb_eps", "perturb_delta"))


def histogram_theorem(local_epsilon: float, *, n: int, cycles: int, delta: float) -> tuple[float, dict[str, float]]:
    """Thm 2's smallest ε' at δ_total = Kδ + δ' for RR_γ of LDP level ε₀ = `local_epsilon`, and that split.

    Each window is (ε, δ)-DP with ε = ε₀ / (12 √(ln(1/δ)/n)) (Thm 2's calibration read backwards).
    """
    return _advanced_composition(lambda per_window: local_epsilon / (12 * math.sqrt(math.log(1 / per_window) / n)),
                                 cycles=cycles, delta=delta, names=("window_eps", "window_delta"))


def _advanced_composition(per_visit_eps: Callable[[float], float], *, cycles: int, delta: float,
                          names: tuple[str, str]) -> tuple[float, dict[str, float]]:
    """min over the split grid of √(2K ln(1/δ')) ε + K ε(e^ε − 1), ε = per_visit_eps(δ) and Kδ + δ' = `delta`."""
    best = (math.inf, {})
    for share in SPLIT_GRID:
        delta_prime, per_visit = share * delta, (1 - share) * delta / cycles
        eps = per_visit_eps(per_visit)
        value = math.sqrt(2 * cycles * math.log(1 / delta_prime)) * eps + cycles * eps * _expm1(eps)
        if value < best[0] or not best[1]:
            best = (value, {names[0]: eps, names[1]: per_visit, "delta_prime": delta_prime})
    return best


def walk_theorem(mu: float, *, steps: int, n: int, delta: float) -> tuple[float, dict[str, float]]:
    """Thm 3's smallest ε' at δ_total = (T/n)δ + δ' + δ̂, over the split grid, and that split."""
    gamma = 1 - (1 - 1 / n) ** (math.sqrt(n) / 2)
    best = (math.inf, {})
    for share in SPLIT_GRID:
        per_visit = share * delta * n / steps
        eps = float(gaussian_epsilon(mu, per_visit))
        small = math.sqrt(2) * eps / n**0.25
        for rest in SPLIT_GRID:
            delta_prime, delta_hat = (1 - share) * delta * rest, (1 - share) * delta * (1 - rest)
            visits = steps / n + math.sqrt(1.5 * steps * math.log(1 / delta_hat))
            log_term = math.log(1 / delta_prime)
            value = (math.sqrt(2 * visits * log_term) * small + 2 * math.sqrt(2 * visits * gamma * log_term) * eps
                     + visits * small * _expm1(small) + 4 * visits * gamma * eps * _expm1(eps))
            if value < best[0] or not best[1]:
                best = (value, {"perturb_eps": eps, "perturb_delta": per_visit, "delta_prime": delta_prime,
                                "delta_hat": delta_hat, "N_v": visits, "gamma_n": gamma})
    return best


def _expm1(x: float) -> float:
    return math.inf if x > 700 else math.expm1(x)


def _positive(sigma: float) -> Condition:
    return Condition("epsilon, delta > 0 (stated)", sigma > 0,
                     "Perturb is (eps, delta)-LDP with eps finite" if sigma > 0 else
                     "sigma = 0: Perturb gives no LDP guarantee, the bound is infinite")


def _view_condition(run: TokenRun) -> Condition:
    """The theorems bound the token's visits; the result is outside that view."""
    observers = run.result_observers()
    return Condition("view = the token's visits (Eq. 4 / Eq. 5)", not observers,
                     f"observers {_listed(observers)} also receive the result, which the theorem's view leaves out"
                     if observers else "no node received the result")


def _collusion(threat_model: ThreatModel) -> Condition:
    colluders = list(threat_model.collusion)
    return Condition("no collusion", not colluders,
                     f"observers {_listed(colluders)} collude; the theorem bounds one observer" if colluders else
                     "one observer at a time")


def _visits_condition(run: TokenRun, bound: float, realized: bool) -> Condition:
    """Thm 3 bounds every observer's visits by N_v (Chernoff, failing with probability delta_hat)."""
    name = "visits of each observer <= N_v"
    if not realized:
        return Condition(name, True, f"ex ante: holds with probability >= 1 - delta_hat (N_v = {bound:.4g})")
    over = [v for v, count in enumerate(run.visits()) if count > bound]
    return Condition(name, not over, f"observers {_listed(over)} were visited more than N_v = {bound:.4g} times"
                     if over else f"realized visits at most {int(run.visits().max())} <= N_v = {bound:.4g}")


def _listed(nodes: Sequence[int]) -> str:
    return ", ".join(str(v) for v in nodes)
