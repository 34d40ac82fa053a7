"""The private warm start (AISTATS 2018 Remark 3, supplementary Sec. C): a noisy local model, paid from the budget.

An agent's local model is the minimiser of L_i with clipped example gradients, 2λ_i-strongly convex:
replacing one example moves it by at most L₀/(m_i λ_i) in l2, √p times that in l1 (plus the
solver's tolerance), and Laplace noise of scale Δ₁/ε_ws makes it ε_ws-DP. Its ε_ws is the agent's
release 0, and its T_i updates split what remains of ε̄_i.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from coordinator_tools.audit.protocols.personalized_cd.simulate import local_model
from coordinator_tools.dataprep.personalized_task import generate_task, task_topology
from netdp.v1 import viewlog_pb2
from node.budget import equal_split, theorem1_epsilon
from node.context import NodeNoise
from node.journal import Journal
from node.learning import LocalData, example_gradients
from node.noise import make_samplers
from node.personalized import LOCAL_MODEL_TOLERANCE, AgentProblem
from node.protocols.personalized_cd import PersonalizedCDParams

P, DELTA = 5, math.exp(-5)
BASE = {"dimension": P, "mu": 1.0, "max_examples": 100, "updates": 5, "lipschitz": 0.3}


def test_the_local_model_minimises_the_clipped_local_loss() -> None:
    task = generate_task(6, P, seed=2)
    for lipschitz in (0.3, 10.0):  # rows of l2 norm <= 1: an l1 clip of 10 never bites, one of 0.3 does
        params = PersonalizedCDParams(**{**BASE, "lipschitz": lipschitz})
        topology = task_topology(task, params, run_id="t")
        for v in range(6):
            agent = AgentProblem.of(params, topology, v, task.train[v])
            theta = agent.local_model()
            assert np.linalg.norm(agent.gradient(theta)[0]) <= LOCAL_MODEL_TOLERANCE * lipschitz / agent.examples
            if lipschitz == 10.0:  # unclipped: the auditor's L-BFGS baseline finds the same minimiser
                assert theta == pytest.approx(local_model(agent), abs=1e-3)  # to L-BFGS-B's own tolerance


def test_one_replaced_example_moves_the_local_model_by_at_most_its_sensitivity_in_l1() -> None:
    rng = np.random.default_rng(4)
    m, regularization = 20, 0.05
    x, y = rng.normal(size=(m, P)) * 3.0, rng.choice([-1.0, 1.0], m)
    assert np.abs(example_gradients("logistic", np.zeros(P), x, y)).sum(axis=1).min() > 0.3  # the clip bites
    moves = []
    for _ in range(30):
        other = x.copy()
        other[rng.integers(m)] = rng.normal(size=P) * 10.0
        smoothness = max(np.sum(x**2, axis=1).max(), np.sum(other**2, axis=1).max()) / 4 + 2 * regularization
        agent = AgentProblem(LocalData(x, y), "logistic", 1.0, 0.3, 0.5, regularization, 0.5, {}, smoothness)
        neighbour = replace(agent, data=LocalData(other, y))
        moves.append(np.abs(agent.local_model() - neighbour.local_model()).sum())
    sensitivity = agent.warm_start_sensitivity
    assert sensitivity == pytest.approx(math.sqrt(P) * (1 + LOCAL_MODEL_TOLERANCE) * 0.3 / (m * regularization))
    assert max(moves) <= sensitivity and max(moves) > 0.1 * sensitivity  # within the bound, and not far below it


def test_the_warm_start_noise_scale_is_its_l1_sensitivity_over_its_epsilon(tmp_path: Path) -> None:
    task = generate_task(4, P, seed=0)
    params = PersonalizedCDParams(**BASE, epsilon=2.0, warm_start_epsilon=0.5)
    agent = AgentProblem.of(params, task_topology(task, params, run_id="t"), 0, task.train[0])
    assert agent.warm_start_sensitivity == pytest.approx(
        math.sqrt(P) * (1 + LOCAL_MODEL_TOLERANCE) * 0.3 / (agent.examples * (1 / agent.examples)))
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    try:
        for kind in ("simulation", "secure"):  # the secure sampler's grid may widen the scale, never narrow it
            samplers = make_samplers(kind, 0 if kind == "simulation" else None)
            noise = NodeNoise(samplers.gaussian, journal, samplers.randomized_response, samplers.laplace)
            scale, spent = noise.laplace_scale(agent.warm_start_sensitivity, 0.5)
            assert scale >= agent.warm_start_sensitivity / 0.5 * (1 - 1e-12) and spent <= 0.5
            if kind == "simulation":
                assert scale * spent == pytest.approx(agent.warm_start_sensitivity)
    finally:
        journal.close()


@pytest.mark.parametrize(("delta", "split"), [(0.0, "equal"), (DELTA, "equal"), (DELTA, "proposition2")])
def test_the_warm_start_is_release_0_and_the_updates_split_what_remains(delta: float, split: str) -> None:
    ratio = {"curvature_ratio": 0.4} if split == "proposition2" else {}
    params = PersonalizedCDParams(**BASE, epsilon=5.0, delta=delta, warm_start_epsilon=0.05, budget_split=split,
                                  **ratio)
    schedule = params.release_epsilons(0, 40)
    assert params.releases == len(schedule) == 6 and schedule[0] == 0.05
    assert theorem1_epsilon(schedule, delta) == pytest.approx(5.0, rel=1e-12)
    assert [params.step_epsilon(0, step, 40) for step in range(5)] == list(schedule[1:])
    if split == "equal":
        assert schedule[1:] == pytest.approx([equal_split(4.95, 0.0, 5)] * 5 if delta == 0.0 else [schedule[1]] * 5)


@pytest.mark.parametrize(("fields", "message"), [
    ({"epsilon": 1.0, "warm_start_epsilon": 1.0}, "leaves nothing for the updates"),
    ({"epsilon": 5.0, "warm_start_epsilon": 0.5, "budgets": [{"node": 3, "epsilon": 0.4}]}, "budget is 0.4"),
    ({"warm_start_epsilon": 0.5}, "needs a private run"),
    ({"epsilon": 5.0, "warm_start_epsilon": 0.5, "regularization": 0.0}, "needs lambda_i > 0"),
])
def test_a_warm_start_the_budget_cannot_pay_or_bound_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PersonalizedCDParams(**BASE, **fields)
