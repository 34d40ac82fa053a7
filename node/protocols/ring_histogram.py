"""Ring histogram (PAbD Alg. 2) on the public ring: L-ary randomized response, a token of counts.

Every node holds one category x_u ∈ {0..L−1} (its data file: one integer). The token τ is the
count vector of length L, sent as a float vector. Node 0 originates it with m = ⌈γn⌉ uniformly
random elements (secure draws, logged privately as one `init` draw), then it goes K times round
the public ring 0 → 1 → … → n−1 → 0 exactly as ring-sum's token (`ring_sum.RingTokenNode`): at
every visit the holder draws y = RR_γ(x_u) — with probability γ a uniform element of {0..L−1},
else x_u — from its own sampler (logged privately, purpose `rr`, as e_y − e_x; never in the view
log) and adds one to τ[y]. RR_γ is ε-randomized response at ε = ln(1 + L(1−γ)/γ): it keeps x_u
with probability 1 − γ + γ/L and gives each other category γ/L.

After the K·n-th contribution node n − 1 holds τ and sends it round once more as the result
token (ring-sum's custody, deadlines and farewell). Every node outputs the debiased estimate
(`debiased`) of the number of nodes holding each category.

γ is published directly, or chosen for a target (ε, δ) by PAbD Thm 2 (`thm2_gamma`): the
topology commands calibrate it from n, and a topology whose γ does not match its target is
refused when loaded.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from node.data import load_vector
from node.errors import ConfigError
from node.mailboxes.token_slot import Token
from node.protocols import ring_sum
from node.protocols.base import ProtocolSpec

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "ring-histogram"
RR_PURPOSE = "rr"  # RR_γ(x_u) at a visit; the draw's step is the node's visit index k
INIT_PURPOSE = "init"  # the m uniform elements node 0 starts the token with (step 0)
GAMMA_RTOL = 1e-12  # a published γ matches its target's calibration to within this


class Thm2Condition(NamedTuple):
    """One condition of PAbD Thm 2 (or of the shuffling result its proof uses) for given n, ε, δ."""

    name: str
    holds: bool
    detail: str


def rr_epsilon(gamma: float, categories: int) -> float:
    """ε of RR_γ over L categories: ln(1 + L(1−γ)/γ) (∞ at γ = 0: the truth is told, no privacy)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    return math.inf if gamma == 0.0 else math.log1p(categories * (1.0 - gamma) / gamma)


def thm2_local_epsilon(n: int, epsilon: float, delta: float) -> float:
    """ε₀ = 12 ε √(ln(1/δ)/n): the LDP level Thm 2 asks of RR_γ so that n shuffled answers are (ε, δ)-DP."""
    return 12.0 * epsilon * math.sqrt(math.log(1.0 / delta) / n)


def thm2_gamma(n: int, epsilon: float, delta: float, categories: int) -> float:
    """PAbD Thm 2's γ = L / (exp(12 ε √(ln(1/δ)/n)) + L − 1), i.e. RR_γ is ε₀-LDP (`thm2_local_epsilon`)."""
    if n < 1 or categories < 2 or not epsilon > 0.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"Thm 2 needs n >= 1, L >= 2, epsilon > 0 and delta in (0, 1); got n = {n}, "
                         f"L = {categories}, epsilon = {epsilon}, delta = {delta}")
    return categories / (math.exp(thm2_local_epsilon(n, epsilon, delta)) + categories - 1)


def thm2_conditions(n: int, epsilon: float, delta: float) -> tuple[Thm2Condition, ...]:
    """Thm 2's stated conditions (ε < 1/2, δ ∈ (0, 1/100), n > 1000) and Erlingsson et al.'s ε₀ < 1/2,
    which its proof applies to RR_γ (Thm 4 there; n ≥ 100 follows from n > 1000)."""
    local = thm2_local_epsilon(n, epsilon, delta) if 0.0 < delta < 1.0 and n >= 1 else math.nan
    return (
        Thm2Condition("epsilon < 1/2", bool(epsilon < 0.5), f"epsilon = {epsilon:g}"),
        Thm2Condition("delta in (0, 1/100)", bool(0.0 < delta < 0.01), f"delta = {delta:g}"),
        Thm2Condition("n > 1000", n > 1000, f"n = {n}"),
        Thm2Condition("eps0 = 12 eps sqrt(ln(1/delta)/n) < 1/2 (shuffling, Erlingsson et al. Cor. 9)",
                      bool(local < 0.5), f"eps0 = {local:.4g}"),
    )


def calibrate_gamma(n: int, categories: int, epsilon: float, delta: float) -> float:
    """γ for a target (ε, δ) by Thm 2; ConfigError (one line) when Thm 2 cannot promise that target here."""
    if not epsilon > 0.0 or not 0.0 < delta < 1.0:
        raise ConfigError(f"a ring-histogram target needs epsilon > 0 and delta in (0, 1), got epsilon = "
                          f"{epsilon:g}, delta = {delta:g}")
    failing = [condition for condition in thm2_conditions(n, epsilon, delta) if not condition.holds]
    if failing:
        why = "; ".join(f"{condition.name} fails ({condition.detail})" for condition in failing)
        raise ConfigError(f"PAbD Thm 2 cannot promise epsilon = {epsilon:g} at delta = {delta:g} on {n} nodes: "
                          f"{why}; pass --gamma to choose the randomization directly")
    gamma = thm2_gamma(n, epsilon, delta, categories)
    if not gamma < 1.0:
        raise ConfigError(f"epsilon = {epsilon:g} calibrates gamma to 1 in floating point: every answer would be "
                          "random and the histogram could not be debiased")
    return gamma


def initial_elements(gamma: float, n: int) -> int:
    """m = ⌈γn⌉, the uniformly random elements the token starts with (γn up to float rounding, then up)."""
    return math.ceil(round(gamma * n, 9))


def debiased(token: np.ndarray, *, gamma: float, n: int, cycles: int) -> np.ndarray:
    """The unbiased estimate of how many nodes hold each category, from the final token τ (K·n answers).

    E[τ_i] = m/L + Σ_{answers} ((1 − γ) 1[x = i] + γ/L) = m/L + (1 − γ) K h_i + K n γ/L, with h_i the
    number of nodes holding category i, so ĥ_i = (τ_i − m/L − K n γ/L) / ((1 − γ) K) has E[ĥ_i] = h_i.
    (Alg. 2's last line, (τ[i] − γ/L)/(1 − γ), is this per answer: for frequencies of τ normalised by the
    answers.) The estimates sum to n exactly; a single one may be negative or above n.
    """
    categories = token.size
    m = initial_elements(gamma, n)
    return (np.asarray(token, dtype=float) - m / categories - cycles * n * gamma / categories) / (
        (1.0 - gamma) * cycles)


class RingHistogramParams(BaseModel):
    """Public parameters of the ring histogram (PAbD Alg. 2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["ring-histogram"] = "ring-histogram"
    categories: int = Field(ge=2, description="L: every node's input is a category in 0..L-1")
    cycles: int = Field(1, ge=1, description="K: times the token goes round the ring")
    gamma: float = Field(ge=0.0, lt=1.0, description="γ: probability that RR_γ replaces an answer by a uniform "
                                                     "category (0: the truth, no privacy)")
    target_epsilon: float | None = Field(None, gt=0.0, description="the ε that γ was calibrated for by Thm 2")
    target_delta: float | None = Field(None, gt=0.0, lt=1.0, description="the δ of that calibration")
    alpha: float = Field(2.0, gt=1.0, description="Renyi order used in reports")

    @model_validator(mode="after")
    def _target_is_a_pair(self) -> "RingHistogramParams":
        if (self.target_epsilon is None) != (self.target_delta is None):
            raise ValueError("a Thm 2 target needs both target_epsilon and target_delta")
        return self

    @property
    def dimension(self) -> int:
        """The token's length: one count per category."""
        return self.categories

    @property
    def sigma(self) -> float:
        """The run's noise level as reports show it under `sigma`: γ (0: no randomization, no privacy)."""
        return self.gamma

    @property
    def sensitivity(self) -> float:
        """Neighbouring datasets replace one node's category by another: one answer's distribution changes."""
        return 1.0

    def hops(self, n: int) -> int:
        return (self.cycles + 1) * n

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Twice the round deadlines a run's node allows its hops (the launcher adds the startup deadline)."""
        return 2 * self.hops(n) * network.round_deadline_s


def check_topology(topology: Topology) -> None:
    """The public ring (as ring-sum's), and a γ that is its published target's Thm 2 calibration."""
    ring_sum.check_graph(topology)
    params: RingHistogramParams = topology.protocol
    if params.target_epsilon is not None:
        expected = thm2_gamma(topology.n, params.target_epsilon, params.target_delta, params.categories)
        if not math.isclose(params.gamma, expected, rel_tol=GAMMA_RTOL):
            raise ValueError(f"gamma {params.gamma!r} is not Thm 2's {expected!r} for epsilon "
                             f"{params.target_epsilon:g}, delta {params.target_delta:g}, n = {topology.n}")


def load_category(path: Path, params: Any) -> int:
    """A node's input: one category, an integer in 0..L−1 (JSON {"value": [c]}, a bare number, NPY or CSV)."""
    value = float(load_vector(path, 1)[0])
    if not value.is_integer() or not 0 <= value < params.categories:
        raise ConfigError(f"{path}: holds {value:g}; a ring-histogram input is one category, an integer in "
                          f"0..{params.categories - 1}")
    return int(value)


class RingHistogramNode(ring_sum.RingTokenNode):
    """One node's part: RR_γ of its category at each visit, the initial random elements at node 0."""

    def __init__(self, context: ProtocolContext, category: int) -> None:
        super().__init__(context)
        self._category = category
        params = context.params
        self._epsilon = rr_epsilon(params.gamma, params.categories)
        self._one_hot = np.zeros(params.categories)
        self._one_hot[category] = 1.0

    async def _initial_value(self) -> np.ndarray:
        params = self._context.params
        return await self._context.noise.uniform_histogram(
            params.categories, initial_elements(params.gamma, self._n), step=0, purpose=INIT_PURPOSE)

    async def _contribute(self, token: Token, visit: int) -> np.ndarray:
        context, params = self._context, self._context.params
        await context.private_input(self._one_hot, False)
        answer = await context.noise.randomized_response(self._category, params.categories, self._epsilon,
                                                         step=visit, purpose=RR_PURPOSE)
        value = token.value.copy()
        value[answer] += 1.0
        return value

    def _output(self, result: np.ndarray) -> np.ndarray:
        params = self._context.params
        return debiased(result, gamma=params.gamma, n=self._n, cycles=params.cycles)


SPEC = ProtocolSpec(PROTOCOL_NAME, RingHistogramParams, RingHistogramNode, load_category)
