"""The paper column of the token walks: PAbD Thm 1 (ring) and Thm 3 (walk) as stated, Thm 2 (histogram) by its proof.

Both theorems start from the (ε, δ)-LDP guarantee of one Perturb(x; σ_loc) and state one
(ε', δ') network-DP guarantee for every pair, so the column is the same ε' for every pair at
the report's δ, with no RDP (the theorems state none). Perturb is the Gaussian mechanism at
σ and sensitivity Δ; its (ε, δ) pairs are read off its exact privacy profile (any ε > 0,
not the classic calibration that needs ε < 1). The report's δ is split between the
theorem's δ terms to make ε' smallest (on a grid; Thm 2's refined to its minimum), and the
split is reported:

* Thm 1 (Alg. 1): ε' = √(2K ln(1/δ')) ε + K ε(e^ε − 1) at δ_total = Kδ + δ';
* Thm 2 (Alg. 2): the same composition, from the (ε, δ) each window between two visits gets by
  shuffling, as the proof applies Erlingsson et al.'s Cor. 9: RR_γ is ε₀-LDP, ε₀ = ln(1 + L(1−γ)/γ),
  so each window is (12 ε₀ √(ln(1/δ_w)/n), δ_w)-DP (`ring_histogram_bound.proof_bound`, its split
  searched to its real minimum). The statement's calibration reads the corollary backwards; its value
  at the same split is reported beside (`PaperBound.stated`), never used as the column;
* Thm 3 (Alg. 3): ε' = √(2N ln(1/δ')) ε₁ + 2√(2Nγ ln(1/δ')) ε + N ε₁(e^{ε₁} − 1) + 4Nγ ε(e^ε − 1),
  ε₁ = √2 ε / n^{1/4}, N = T/n + √((3/2) T ln(1/δ̂)), γ = 1 − (1 − 1/n)^{√n/2}, at
  δ_total = (T/n) δ + δ' + δ̂.

Each theorem's conditions are checked and reported, with the observers where one fails: the
stated ones (ε, δ > 0: σ > 0; for Thm 2 Cor. 9's, which its proof needs), the setting it is
proven for (Alg. 1's single placement; no collusion) and the view it bounds (the K token values
of Eq. 4, the visits of Eq. 5, with Thm 3's N visits): the result that every node but the last
holder receives is outside both views, so pairs it reveals are where the bound can undercount.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from coordinator_tools.audit.accountants import ClosedForm
from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from coordinator_tools.audit.report import json_number
from node.protocols import ring_histogram, ring_sum
from node.protocols.ring_histogram_bound import advanced_composition, corollary_conditions, proof_bound

# Fractions of the report's δ tried for each of a theorem's δ terms (the rest goes to the others).
SPLIT_GRID = np.linspace(0.02, 0.98, 49)
# Thm 3's small cycles as its statement charges them, or as its proof counts them (2N_vγ_n cycles of 2ε).
SmallCycles = Literal["statement", "proof"]
STATEMENT_DISAGREES = (
    "Thm 2's statement sets gamma so that RR_gamma is 12 eps sqrt(ln(1/delta)/n)-LDP, Cor. 9 (which its proof "
    "applies) solved with eps0 and eps swapped; netdp's paper column is the proof's bound, each window "
    "12 eps0 sqrt(ln(1/delta_w)/n) by the corollary, and the statement's value at the same split is shown "
    "beside it only")


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
    stated: dict[str, float] | None = None  # Thm 2: the statement's value where it disagrees with the proof

    def column(self, n: int) -> ClosedForm:
        """The paper column: ε' for every pair, no RDP."""
        eps = np.full((n, n), self.epsilon)
        np.fill_diagonal(eps, np.nan)
        return ClosedForm(rdp=np.full((n, n), np.nan), eps=eps)

    def failing(self) -> list[Condition]:
        return [condition for condition in self.conditions if not condition.holds]

    def to_json(self) -> dict[str, object]:
        document: dict[str, object] = {
            "theorem": self.theorem, "eps": json_number(self.epsilon),
            "split": {name: json_number(value) for name, value in self.split.items()},
            "conditions": [asdict(condition) for condition in self.conditions]}
        if self.stated is not None:
            document["stated"] = {**{name: json_number(value) for name, value in self.stated.items()},
                                  "why_not_used": STATEMENT_DISAGREES}
        return document


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
        return histogram_bound(run, gamma=min(1.0, sigma), delta=delta, threat_model=threat_model)
    steps = run.topology.protocol.steps
    epsilon, split = walk_theorem(mu, steps=steps, n=run.n, delta=delta)
    return PaperBound("PAbD Thm 3 (complete-graph walk real summation)", epsilon, split,
                      (*common, _visits_condition(run, split["N_v"], realized)))


def ring_theorem(mu: float, *, cycles: int, delta: float) -> tuple[float, dict[str, float]]:
    """Thm 1's smallest ε' at δ_total = Kδ + δ', over the split grid, and that split."""
    return _advanced_composition(lambda per_visit: float(gaussian_epsilon(mu, per_visit)), cycles=cycles,
                                 delta=delta, names=("perturb_eps", "perturb_delta"))


def histogram_bound(run: TokenRun, *, gamma: float, delta: float, threat_model: ThreatModel) -> PaperBound:
    """Thm 2 by its proof for RR_γ at `gamma` (Cor. 9 per window, advanced composition over the K cycles), the
    statement's value at the same split beside it, and Cor. 9's conditions at that split."""
    params = run.topology.protocol
    local = ring_histogram.rr_epsilon(gamma, params.categories)
    bound = proof_bound(local, n=run.n, cycles=params.cycles, delta=delta)
    split = {"local_eps": bound.local_epsilon, "window_eps": bound.window_epsilon,
             "window_delta": bound.window_delta, "delta_prime": bound.delta_prime}
    stated = {"eps": bound.stated_epsilon, "window_eps": bound.stated_window_epsilon}
    randomized = Condition("gamma > 0 (stated: epsilon finite)", gamma > 0,
                           "RR_gamma answers at random with probability gamma > 0" if gamma > 0 else
                           "gamma = 0: every answer is the truth, the bound is infinite")
    corollary = tuple(Condition(f"Cor. 9: {c.name}", c.holds, c.detail)
                      for c in corollary_conditions(run.n, local, bound.window_delta))
    return PaperBound("PAbD Thm 2 by its proof (ring histogram)", bound.epsilon, split,
                      (randomized, *corollary, _view_condition(run), _collusion(threat_model)), stated)


def _advanced_composition(per_visit_eps: Callable[[float], float], *, cycles: int, delta: float,
                          names: tuple[str, str]) -> tuple[float, dict[str, float]]:
    """min over the split grid of √(2K ln(1/δ')) ε + K ε(e^ε − 1), ε = per_visit_eps(δ) and Kδ + δ' = `delta`."""
    best = (math.inf, {})
    for share in SPLIT_GRID:
        delta_prime, per_visit = share * delta, (1 - share) * delta / cycles
        eps = per_visit_eps(per_visit)
        value = advanced_composition(eps, windows=cycles, delta_prime=delta_prime)
        if value < best[0] or not best[1]:
            best = (value, {names[0]: eps, names[1]: per_visit, "delta_prime": delta_prime})
    return best


def walk_theorem(mu: float, *, steps: int, n: int, delta: float,
                 small_cycles: SmallCycles = "statement") -> tuple[float, dict[str, float]]:
    """Thm 3's smallest ε' at δ_total = (T/n)δ + δ' + δ̂, over the split grid, and that split."""
    gamma = walk_gamma(n)
    best = (math.inf, {})
    for share in SPLIT_GRID:
        per_visit = share * delta * n / steps
        eps = float(gaussian_epsilon(mu, per_visit))
        for rest in SPLIT_GRID:
            delta_prime, delta_hat = (1 - share) * delta * rest, (1 - share) * delta * (1 - rest)
            visits = walk_visits(steps, n, delta_hat)
            value = walk_epsilon(eps, n=n, visits=visits, delta_prime=delta_prime, small_cycles=small_cycles)
            if value < best[0] or not best[1]:
                best = (value, {"perturb_eps": eps, "perturb_delta": per_visit, "delta_prime": delta_prime,
                                "delta_hat": delta_hat, "N_v": visits, "gamma_n": gamma})
    return best


def walk_gamma(n: int) -> float:
    """Thm 3's γ_n = 1 − (1 − 1/n)^(√n/2): the chance that a cycle between two visits is small."""
    return 1 - (1 - 1 / n) ** (math.sqrt(n) / 2)


def walk_visits(steps: int, n: int, delta_hat: float) -> float:
    """Thm 3's N_v = T/n + √(3/2 T ln(1/δ̂)): the Chernoff bound on one node's visits."""
    return steps / n + math.sqrt(1.5 * steps * math.log(1 / delta_hat))


def walk_epsilon(eps: float, *, n: int, visits: float, delta_prime: float,
                 small_cycles: SmallCycles = "statement") -> float:
    """Thm 3's ε' for an ε-LDP Perturb: advanced composition of N_v large cycles at √2 ε / n^(1/4) plus the
    small cycles, as stated (2√(2N_vγ_n ln(1/δ'))ε + 4N_vγ_n ε(e^ε − 1)) or as the proof counts them
    (`proof`: 2N_vγ_n small cycles of 2ε each, composed the same way)."""
    gamma, log_term = walk_gamma(n), math.log(1 / delta_prime)
    large = math.sqrt(2) * eps / n**0.25
    value = math.sqrt(2 * visits * log_term) * large + visits * large * _expm1(large)
    if small_cycles == "statement":
        return value + 2 * math.sqrt(2 * visits * gamma * log_term) * eps + 4 * visits * gamma * eps * _expm1(eps)
    cycles = 2 * visits * gamma
    return value + math.sqrt(2 * cycles * log_term) * 2 * eps + cycles * 2 * eps * _expm1(2 * eps)


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
