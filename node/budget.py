"""Per-agent privacy budgets (personalized learning, AISTATS 2018 Thm 1): composition, splits, ledger.

An agent that releases T outputs, the t-th ε_t-DP, is (ε̄, δ̄)-DP with ε̄ the smallest of three
bounds (Kairouz et al. 2015, as the paper's Thm 1 states them): the plain sum Σ ε_t, and two
advanced forms that need δ̄ > 0. An agent splits its budget (ε̄, δ̄) over its T wake-ups in a
fixed shape (equal, or Prop. 2's decreasing one), scaled as far as the composition stays within ε̄,
after whatever it spent first (a private warm start).

The ledger is what stops an agent: it writes each step's spend to the public view log *before*
the step's output leaves the node (a crash in between leaves a counted spend that was never
released, never a release that was not counted), and refuses a step the budget cannot pay for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from netdp.v1 import viewlog_pb2
from node.journal import Journal

# A composition within this relative margin of the budget is within it: the same sum taken in
# another order, or of grid-corrected values, may round a few ulps above it.
BUDGET_RTOL = 1e-9
MECHANISM = "laplace"


class BudgetExhausted(Exception):
    """The step would take the agent's composed ε beyond its budget."""


def theorem1_epsilon(epsilons: Iterable[float], delta: float) -> float:
    """ε̄ of releasing outputs that are ε_t-DP each, at δ̄ = `delta` (Thm 1; δ̄ = 0: the plain sum)."""
    eps = np.asarray(list(epsilons), dtype=float)
    if eps.size and not (np.all(eps >= 0.0) and np.all(np.isfinite(eps))):
        raise ValueError("every step's epsilon must be finite and >= 0")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    total = float(eps.sum())
    if delta == 0.0 or not eps.size:
        return total
    drift = float(np.sum(eps * np.tanh(eps / 2.0)))  # Σ (e^ε − 1) ε / (e^ε + 1)
    squares = float(np.sum(eps**2))
    first = drift + math.sqrt(2.0 * squares * math.log(math.e + math.sqrt(squares) / delta))
    second = drift + math.sqrt(2.0 * squares * math.log(1.0 / delta))
    return min(total, first, second)


def proportional_split(epsilon: float, delta: float, shape: Sequence[float] | np.ndarray,
                       spent: Sequence[float] = ()) -> tuple[float, ...]:
    """ε_t = c · shape_t for the largest c whose composition after `spent` (Thm 1 at δ̄) is at most ε̄.

    Bisected down to adjacent floats, so the schedule meets the budget exactly (δ̄ = 0: it sums to
    ε̄ − Σ spent) without ever composing above it.
    """
    weights = np.asarray(shape, dtype=float)
    if not epsilon > 0.0 or not weights.size or not np.all((weights > 0.0) & np.isfinite(weights)):
        raise ValueError(f"a budget split needs epsilon > 0 and positive weights, got {epsilon}, {shape}")

    def fits(scale: float) -> bool:
        return theorem1_epsilon([*spent, *(scale * weights)], delta) <= epsilon

    if not fits(0.0):
        raise ValueError(f"spends {list(spent)} leave nothing of the budget {epsilon:g} to split")
    low = max(0.0, (epsilon - float(np.sum(spent))) / float(weights.sum()))  # the plain sum: fits up to rounding
    while low > 0.0 and not fits(low):
        low = float(np.nextafter(low, 0.0))
    high = max(2.0 * low, epsilon / float(weights.max()))
    while fits(high):
        low, high = high, 2.0 * high
    while True:  # bisect down to adjacent floats
        middle = (low + high) / 2.0
        if middle in (low, high):
            return tuple(float(step) for step in low * weights)
        low, high = (middle, high) if fits(middle) else (low, middle)


def equal_split(epsilon: float, delta: float, steps: int) -> float:
    """The largest per-step ε whose `steps`-fold composition (Thm 1 at δ̄ = `delta`) is at most `epsilon`."""
    if steps < 1:
        raise ValueError(f"a budget split needs at least one step, got {steps}")
    return proportional_split(epsilon, delta, [1.0] * steps)[0]


def proposition2_shape(steps: int, agents: int, curvature_ratio: float) -> np.ndarray:
    """Prop. 2's ε_i(t) ∝ C^{t/3}, C = 1 − σ/(n L_max), at the expected iteration t ≈ k·n of wake-up k.

    The paper's schedule needs the global iterations at which agent i wakes up, which no agent
    knows; its suggested heuristic takes their expectations: n agents on Poisson clocks of one rate
    wake up in a uniformly random order, so agent i's k-th wake-up is expected at t ≈ k·n. A common
    factor cancels once the schedule is scaled to the budget, so the shape starts at 1 and each
    step is C^{n/3} times the one before: ε decreases and the noise grows over an agent's run, as the
    paper's formula (C < 1) and its text ("the noise scale increases with time") have it.
    """
    if steps < 1 or agents < 2 or not 0.0 < curvature_ratio <= 1.0:
        raise ValueError(f"Prop. 2 needs steps >= 1, n >= 2 and sigma/L_max in (0, 1], got {steps}, {agents}, "
                         f"{curvature_ratio}")
    per_step = agents * math.log1p(-curvature_ratio / agents) / 3.0  # log C^{n/3}
    shape: np.ndarray = np.exp(per_step * np.arange(steps))
    if not shape[-1] > 0.0:
        raise ValueError(f"Prop. 2 leaves the last of {steps} updates no budget at sigma/L_max = {curvature_ratio}: "
                         "publish fewer updates or a smaller ratio")
    return shape


def within(epsilons: Sequence[float], budget_epsilon: float, budget_delta: float) -> bool:
    """Whether these spends compose (Thm 1) within the budget."""
    return theorem1_epsilon(epsilons, budget_delta) <= budget_epsilon * (1.0 + BUDGET_RTOL)


def budget_record(step: int, epsilon: float) -> viewlog_pb2.Record:
    """The public record of one step's spend: pure ε-DP (δ = 0) by the Laplace mechanism."""
    return viewlog_pb2.Record(budget=viewlog_pb2.BudgetSpent(step=step, epsilon=epsilon, delta=0.0,
                                                             mechanism=MECHANISM))


class BudgetLedger:
    """One agent's budget (ε̄, δ̄) and what it has spent, kept in its public view log."""

    def __init__(self, journal: Journal, epsilon: float, delta: float) -> None:
        self._journal = journal
        self.epsilon = epsilon
        self.delta = delta
        self._spent: list[float] = []

    @classmethod
    def resumed(cls, journal: Journal, epsilon: float, delta: float,
                logged: Iterable[viewlog_pb2.BudgetSpent]) -> BudgetLedger:
        """A restarted agent's ledger: every spend its view log holds counts, its release done or not."""
        ledger = cls(journal, epsilon, delta)
        ledger._spent = [float(spend.epsilon) for spend in logged]
        return ledger

    @property
    def spent(self) -> tuple[float, ...]:
        """Every step's ε so far, in order."""
        return tuple(self._spent)

    def affords(self, epsilon: float) -> bool:
        """Whether one more step at ε keeps the composition within the budget."""
        return within([*self._spent, epsilon], self.epsilon, self.delta)

    async def spend(self, step: int, epsilon: float, *, alongside: Sequence[viewlog_pb2.Record] = ()) -> None:
        """Log the step's spend (with `alongside`, durable together) before its output is released.

        Raises BudgetExhausted, logging nothing, when the budget cannot pay for it.
        """
        if not self.affords(epsilon):
            raise BudgetExhausted(f"step {step} at epsilon {epsilon:.6g} would compose to "
                                  f"{theorem1_epsilon([*self._spent, epsilon], self.delta):.6g} > {self.epsilon:g}")
        await self._journal.write(budget_record(step, epsilon), *alongside)
        self._spent.append(epsilon)
