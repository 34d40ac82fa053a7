"""How an agent splits its budget over its updates: equally (the default) or by the paper's Prop. 2.

Prop. 2 (AISTATS 2018) gives ε_i(t) = ε*(t) / λ_{T_i}(i) with ε*(t) = (C^{1/3} − 1)/(C^{T/3} − 1) C^{t/3} ε̄_i
(Lemma 3) at the global iterations t ∈ T_i agent i wakes up, C = 1 − σ/(n L_max). The agents take
the expected iteration of their k-th wake-up, t = k n, and the schedule is scaled so that Thm 1's
composition at δ̄_i meets ε̄_i exactly (at δ̄_i = 0: the plain sum, Prop. 2's own normalisation).
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from netdp.v1 import viewlog_pb2
from node.budget import BudgetExhausted, BudgetLedger, equal_split, proposition2_shape, theorem1_epsilon, within
from node.journal import Journal
from node.protocols.personalized_cd import PersonalizedCDParams

DELTA = math.exp(-5)
BASE = {"dimension": 3, "mu": 1.0, "max_examples": 100}


def params(**fields: object) -> PersonalizedCDParams:
    return PersonalizedCDParams(**{**BASE, "updates": 5, "epsilon": 5.0, "delta": DELTA, **fields})


def proposition2(updates: int, n: int, ratio: float) -> PersonalizedCDParams:
    return params(updates=updates, delta=0.0, budget_split="proposition2", curvature_ratio=ratio)


@pytest.mark.parametrize("n", [2, 40, 1000])
def test_the_equal_split_is_the_default_and_does_not_depend_on_n(n: int) -> None:
    published = params()
    assert published.budget_split == "equal" and published.curvature_ratio is None
    assert published.release_epsilons(0, n) == (equal_split(5.0, DELTA, 5),) * 5
    assert [published.step_epsilon(0, step, n) for step in range(5)] == [equal_split(5.0, DELTA, 5)] * 5


@pytest.mark.parametrize(("updates", "n", "ratio"), [(5, 40, 0.05), (10, 100, 0.5), (3, 2, 1.0), (50, 10, 0.2)])
def test_proposition2_is_the_papers_formula_at_the_expected_wake_up_iterations(updates: int, n: int,
                                                                             ratio: float) -> None:
    c, total = 1.0 - ratio / n, updates * n  # T = n T_i iterations; agent i expected at t = k n, k = 1..T_i
    wake_ups = n * np.arange(1, updates + 1)
    lemma3 = (c ** (1 / 3) - 1) / (c ** (total / 3) - 1) * c ** (wake_ups / 3) * 5.0  # ε*(t) at ε̄ = 5
    expected = lemma3 / (lemma3.sum() / 5.0)  # divided by λ_{T_i}(i) = Σ_{t ∈ T_i} ε*(t) / ε̄
    schedule = proposition2(updates, n, ratio).release_epsilons(0, n)
    assert schedule == pytest.approx(expected, rel=1e-9)
    assert sum(schedule) == pytest.approx(5.0, rel=1e-12) and sum(schedule) <= 5.0


def test_the_schedule_decreases_so_the_noise_grows_over_time_as_in_the_paper() -> None:
    # C < 1 in ε(t) ∝ C^{t/3}: later wake-ups get less ε, so the Laplace scale 2 L0 / (ε m_i) grows, which the paper
    # states ("better utility can be achieved if the noise scale increases with time")
    schedule = np.array(proposition2(8, 20, 0.6).release_epsilons(0, 20))
    assert np.all(np.diff(schedule) < 0.0)
    assert np.all(np.diff(2 * 0.3 / (schedule * 50)) > 0.0)
    assert schedule[1:] / schedule[:-1] == pytest.approx(np.full(7, (1 - 0.6 / 20) ** (20 / 3)), rel=1e-12)


@pytest.mark.parametrize(("epsilon", "delta", "updates", "ratio"), [(5.0, DELTA, 5, 0.3), (1.0, DELTA, 200, 0.5),
                                                                    (0.1, 1e-6, 50, 0.05), (2.0, 0.0, 7, 1.0)])
def test_the_schedule_composes_by_thm1_exactly_to_the_budget(epsilon: float, delta: float, updates: int,
                                                           ratio: float) -> None:
    published = params(epsilon=epsilon, delta=delta, updates=updates, budget_split="proposition2",
                       curvature_ratio=ratio)
    schedule = published.release_epsilons(0, 30)
    assert len(schedule) == updates and within(schedule, epsilon, delta)
    assert theorem1_epsilon(schedule, delta) == pytest.approx(epsilon, rel=1e-12)
    assert theorem1_epsilon(np.array(schedule) * (1 + 1e-9), delta) > epsilon  # the largest such multiple
    assert np.array(schedule) / schedule[0] == pytest.approx(proposition2_shape(updates, 30, ratio), rel=1e-12)


def test_an_agent_with_its_own_budget_gets_its_own_schedule() -> None:
    published = params(budget_split="proposition2", curvature_ratio=0.3, budgets=[{"node": 1, "epsilon": 1.0}])
    own, default = published.release_epsilons(1, 10), published.release_epsilons(0, 10)
    assert sum(own) == pytest.approx(1.0) and theorem1_epsilon(default, DELTA) == pytest.approx(5.0)
    assert np.array(own) / own[0] == pytest.approx(np.array(default) / default[0])


@pytest.mark.parametrize(("fields", "message"), [
    ({"budget_split": "proposition2"}, "goes with curvature_ratio"),
    ({"curvature_ratio": 0.5}, "goes with curvature_ratio"),
    ({"budget_split": "proposition2", "curvature_ratio": 0.5, "epsilon": None, "delta": 0.0}, "needs a private run"),
    ({"budget_split": "proposition2", "curvature_ratio": 1.5}, "less than or equal to 1"),
])
def test_an_incomplete_proposition2_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        params(**fields)


def test_a_schedule_that_starves_its_last_updates_is_refused() -> None:
    with pytest.raises(ValueError, match="leaves the last of 5000 updates no budget"):
        proposition2_shape(5000, 10, 1.0)


def test_the_ledger_pays_the_whole_schedule_and_refuses_any_step_beyond(tmp_path: Path) -> None:
    schedule = params(budget_split="proposition2", curvature_ratio=0.8).release_epsilons(0, 5)
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    ledger, inflated = BudgetLedger(journal, 5.0, DELTA), BudgetLedger(journal, 5.0, DELTA)

    async def spend() -> int:
        for step, epsilon in enumerate(schedule):
            await ledger.spend(step, epsilon)
        with pytest.raises(BudgetExhausted):
            await ledger.spend(len(schedule), min(schedule))
        for step, epsilon in enumerate(schedule):  # every step 0.1% above its share: the last one cannot be paid
            try:
                await inflated.spend(step, epsilon * 1.001)
            except BudgetExhausted:
                return step
        return len(schedule)

    try:
        assert asyncio.run(spend()) == len(schedule) - 1
    finally:
        journal.close()
    assert ledger.spent == schedule and within(inflated.spent, 5.0, DELTA)
