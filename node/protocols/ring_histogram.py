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

γ is published directly, or calibrated for a target (ε, δ) of the whole run by PAbD Thm 2 as its
proof supports (`calibrate_gamma`, `ring_histogram_bound`): the topology commands calibrate it
from n and K, and a topology whose γ does not match its target is refused when loaded.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from node.data import load_vector
from node.errors import ConfigError
from node.mailboxes.token_slot import Token
from node.protocols import ring_sum
from node.protocols.base import ProtocolPlugin, ProtocolSpec
from node.protocols.ring_histogram_bound import MAX_LOCAL_EPSILON, MAX_WINDOW_DELTA, MIN_REPORTS, proof_bound

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams, Topology

PROTOCOL_NAME = "ring-histogram"
RR_PURPOSE = "rr"  # RR_γ(x_u) at a visit; the draw's step is the node's visit index k
INIT_PURPOSE = "init"  # the m uniform elements node 0 starts the token with (step 0)
GAMMA_RTOL = 1e-12  # a published γ matches its target's calibration to within this


def rr_epsilon(gamma: float, categories: int) -> float:
    """ε of RR_γ over L categories: ln(1 + L(1−γ)/γ) (∞ at γ = 0: the truth is told, no privacy)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    return math.inf if gamma == 0.0 else math.log1p(categories * (1.0 - gamma) / gamma)


def calibrate_gamma(n: int, categories: int, epsilon: float, delta: float, cycles: int) -> float:
    """The smallest γ (least randomization) whose Thm 2 bound, by its proof, is (ε, δ) for the whole run of K
    cycles at its best δ split, with ε₀ < 1/2 as Cor. 9 needs; ConfigError (one line) when none exists here.

    Bisected on γ itself, so that the audit's `proof_bound` of the γ published is at most ε, not ε up to rounding.
    """
    if not epsilon > 0.0 or not 0.0 < delta < MAX_WINDOW_DELTA:
        raise ConfigError(f"a ring-histogram target needs target_epsilon > 0 and target_delta in (0, 1/100) (each "
                          f"window's delta below Cor. 9's 1/100), got {epsilon:g} and {delta:g}")
    if n < MIN_REPORTS:
        raise ConfigError(f"PAbD Thm 2 cannot promise epsilon = {epsilon:g} at delta = {delta:g} on {n} nodes: its "
                          f"proof's Cor. 9 needs n >= {MIN_REPORTS} answers per window; pass --gamma to choose the "
                          "randomization directly")

    def meets(gamma: float) -> bool:
        local = rr_epsilon(gamma, categories)
        return local < MAX_LOCAL_EPSILON and proof_bound(local, n=n, cycles=cycles, delta=delta).epsilon <= epsilon

    low, high = 0.0, 1.0  # meets(1.0): every answer random, ε₀ = 0
    while math.nextafter(low, high) < high:
        middle = (low + high) / 2
        low, high = (low, middle) if meets(middle) else (middle, high)
    if not high < 1.0:
        raise ConfigError(f"epsilon = {epsilon:g} calibrates gamma to 1 in floating point: every answer would be "
                          "random and the histogram could not be debiased")
    return high


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
    target_epsilon: float | None = Field(None, gt=0.0, description="the ε' of the whole run (K windows composed) "
                                         "that γ was calibrated for by Thm 2's proof")
    target_delta: float | None = Field(None, gt=0.0, lt=1.0, description="the δ of that calibration")
    alpha: float = Field(2.0, gt=1.0, description="Renyi order used in reports")

    @model_validator(mode="after")
    def _target_is_a_pair(self) -> RingHistogramParams:
        if (self.target_epsilon is None) != (self.target_delta is None):
            raise ValueError("a Thm 2 target needs both target_epsilon and target_delta")
        return self

    @property
    def dimension(self) -> int:
        """The token's length: one count per category."""
        return self.categories

    @property
    def canaries(self) -> int:
        """Randomized response over categories has no real coordinate a canary could ride on."""
        return 0

    @property
    def vector_length(self) -> int:
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
    """The public ring (as ring-sum's), and a γ that is its published target's calibration by Thm 2's proof."""
    ring_sum.check_graph(topology)
    params = topology.protocol
    if not isinstance(params, RingHistogramParams):
        raise ValueError(f"{PROTOCOL_NAME} checks its own topologies, not {topology.protocol_name}'s")
    if params.target_epsilon is not None and params.target_delta is not None:
        expected = calibrate_gamma(topology.n, params.categories, params.target_epsilon, params.target_delta,
                                   params.cycles)
        if not math.isclose(params.gamma, expected, rel_tol=GAMMA_RTOL):
            raise ValueError(f"gamma {params.gamma!r} is not Thm 2's {expected!r} (by its proof) for epsilon "
                             f"{params.target_epsilon:g}, delta {params.target_delta:g}, n = {topology.n}, "
                             f"K = {params.cycles}")


def load_category(path: Path, params: Any) -> int:
    """A node's input: one category, an integer in 0..L−1 (JSON {"value": [c]}, a bare number, NPY or CSV)."""
    value = float(load_vector(path, 1)[0])
    if not value.is_integer() or not 0 <= value < params.categories:
        raise ConfigError(f"{path}: holds {value:g}; a ring-histogram input is one category, an integer in "
                          f"0..{params.categories - 1}")
    return int(value)


class RingHistogramNode(ring_sum.RingTokenNode[RingHistogramParams]):
    """One node's part: RR_γ of its category at each visit, the initial random elements at node 0."""

    def __init__(self, context: ProtocolContext[RingHistogramParams], category: int) -> None:
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


PLUGIN = ProtocolPlugin(
    ProtocolSpec(PROTOCOL_NAME, RingHistogramParams, RingHistogramNode, load_category,
                 graphs=frozenset({"undirected", "directed"}), check_graph=check_topology, gaussian=False),
    auditor="coordinator_tools.audit.protocols.token_sum:RING_HISTOGRAM",
    options="coordinator_tools.topology.protocol_options:RING_HISTOGRAM",
)
