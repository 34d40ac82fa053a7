"""Per-agent budgets of personalized learning: Thm 1's composition, the equal split, and the ledger that stops an
agent."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from netdp.v1 import viewlog_pb2
from node.budget import BudgetExhausted, BudgetLedger, equal_split, theorem1_epsilon
from node.journal import Journal
from node.viewlog import VIEW_LOG_NAME, read_log

DELTA = math.exp(-5)  # the paper's delta-bar


def test_without_delta_the_composition_is_the_plain_sum() -> None:
    assert theorem1_epsilon([0.5, 0.25, 1.0], 0.0) == pytest.approx(1.75, rel=1e-15)
    assert theorem1_epsilon([], DELTA) == 0.0


def test_many_small_steps_compose_by_the_advanced_bounds_as_thm1_writes_them() -> None:
    eps = np.full(100, 0.01)
    drift = 100 * 0.01 * (math.exp(0.01) - 1) / (math.exp(0.01) + 1)
    second = drift + math.sqrt(2 * 100 * 0.01**2 * math.log(1 / DELTA))
    first = drift + math.sqrt(2 * 100 * 0.01**2 * math.log(math.e + math.sqrt(100 * 0.01**2) / DELTA))
    assert theorem1_epsilon(eps, DELTA) == pytest.approx(min(1.0, first, second), rel=1e-12)
    assert theorem1_epsilon(eps, DELTA) < 0.35  # far below the plain sum of 1


@pytest.mark.parametrize(("epsilon", "delta", "steps"), [(5.0, 0.0, 5), (5.0, DELTA, 5), (1.0, DELTA, 200),
                                                         (0.1, 1e-6, 50)])
def test_the_equal_split_is_the_largest_step_whose_composition_fits(epsilon: float, delta: float, steps: int) -> None:
    step = equal_split(epsilon, delta, steps)
    assert theorem1_epsilon([step] * steps, delta) <= epsilon
    assert theorem1_epsilon([np.nextafter(step * (1 + 1e-12), np.inf)] * steps, delta) > epsilon
    assert step >= epsilon / steps


def test_the_paper_budget_of_5_over_5_updates_gives_1_per_update() -> None:
    assert equal_split(5.0, DELTA, 5) == pytest.approx(1.0, rel=1e-12)


@pytest.fixture
def journal(tmp_path: Path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    yield journal
    journal.close()


def test_the_ledger_logs_each_spend_with_its_step_and_refuses_the_step_beyond(journal: Journal,
                                                                             tmp_path: Path) -> None:
    ledger = BudgetLedger(journal, 2.0, 0.0)
    inputs = viewlog_pb2.Record(step_inputs=viewlog_pb2.StepInputs(step=0))

    async def spend_all() -> None:
        await ledger.spend(0, 1.0, alongside=(inputs,))
        await ledger.spend(1, 1.0)
        with pytest.raises(BudgetExhausted, match="step 2"):
            await ledger.spend(2, 1e-6)

    asyncio.run(spend_all())
    records = read_log(tmp_path / VIEW_LOG_NAME).records[1:]
    assert [record.WhichOneof("kind") for record in records] == ["budget", "step_inputs", "budget"]
    assert [(record.budget.step, record.budget.epsilon, record.budget.mechanism) for record in records[::2]] == [
        (0, 1.0, "laplace"), (1, 1.0, "laplace")]
    assert ledger.spent == (1.0, 1.0) and not ledger.affords(1e-6)
