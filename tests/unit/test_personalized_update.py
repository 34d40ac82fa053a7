"""An agent's problem and update (6) of personalized CD, against the paper's formulas (AISTATS 2018 Sec. 2–3)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from coordinator_tools.audit.protocols.personalized_cd.simulate import simulate_cd
from coordinator_tools.dataprep.personalized_task import generate_task, similarity_weights, targets, task_topology
from node.learning import LocalData, example_gradients
from node.personalized import AgentProblem, objective
from node.protocols.personalized_cd import PersonalizedCDParams

P = 5


def params(**fields: object) -> PersonalizedCDParams:
    return PersonalizedCDParams(**{"dimension": P, "mu": 2.0, "max_examples": 100, "updates": 5, "lipschitz": 0.3,
                                   **fields})


def problems(n: int = 12, seed: int = 1, **fields: object):
    task = generate_task(n, P, seed)
    topology = task_topology(task, params(**fields), run_id="t")
    return task, topology, [AgentProblem.of(topology.protocol, topology, v, task.train[v]) for v in range(n)]


def test_the_constants_are_the_papers_and_the_weights_the_unscaled_similarity_ratios() -> None:
    task, _, agents = problems()
    for v, agent in enumerate(agents):
        m = task.info.train_sizes[v]
        assert agent.examples == m and agent.regularization == pytest.approx(1 / m)
        assert agent.confidence == pytest.approx(m / 100)
        assert agent.step == pytest.approx(1 / (1 + 2.0 * (m / 100) * (0.25 + 2 / m)))
        similarities = {u if w == v else w: weight for (u, w), weight in task.weights.items() if v in (u, w)}
        degree = sum(similarities.values())
        assert dict(agent.weights) == pytest.approx({peer: s / degree for peer, s in similarities.items()})


def test_update_6_is_the_block_step_minus_one_over_L_i_times_the_partial_gradient_3() -> None:
    _, topology, agents = problems()
    rng = np.random.default_rng(0)
    models = rng.normal(size=(len(agents), P))
    for v, agent in enumerate(agents):
        gradient = rng.normal(size=P)  # any gradient, noisy or not: (6) is (4) with ∇L_i + η
        row = topology.weight_row(v)
        degree = 1.0 - row[v]
        block_lipschitz = degree * (1 + agent.mu * agent.confidence * (0.25 + 2 * agent.regularization))
        partial = degree * (models[v] + agent.mu * agent.confidence * gradient) - sum(
            row[u] * models[u] for u in agent.weights)
        expected = models[v] - partial / block_lipschitz
        assert agent.update(models[v], dict(enumerate(models)), gradient) == pytest.approx(expected, rel=1e-12)


def test_one_replaced_example_moves_the_clipped_gradient_by_at_most_2_L0_over_m_in_l1() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(20, P)) * 3.0, rng.choice([-1.0, 1.0], 20)
    agent = AgentProblem(LocalData(x, y), "logistic", 1.0, 0.3, 0.5, 0.05, 0.9, {}, 0.35)
    assert np.abs(example_gradients("logistic", np.zeros(P), x, y)).sum(axis=1).min() > 0.3  # the clip bites
    for _ in range(50):
        theta = rng.normal(size=P)
        other = x.copy()
        other[rng.integers(20)] = rng.normal(size=P) * 10.0
        moved = agent.gradient(theta)[0] - replace(agent, data=LocalData(other, y)).gradient(theta)[0]
        assert np.abs(moved).sum() <= agent.sensitivity * (1 + 1e-12) == pytest.approx(2 * 0.3 / 20)


def test_non_private_cd_never_increases_objective_2_when_no_gradient_is_clipped() -> None:
    _, topology, agents = problems(lipschitz=10.0)  # rows of l2 norm <= 1: an l1 clip of 10 never bites
    rng = np.random.default_rng(5)
    models = np.zeros((len(agents), P))
    values = [objective(agents, topology, models)]
    for v in rng.permutation(np.repeat(np.arange(len(agents)), 10)):
        models[v] = agents[v].update(models[v], dict(enumerate(models)), agents[v].gradient(models[v])[0])
        values.append(objective(agents, topology, models))
    assert np.all(np.diff(values) <= 1e-12) and values[-1] < 0.95 * values[0]
    simulated = simulate_cd(agents, 10, None, np.random.default_rng(5))
    assert objective(agents, topology, simulated) == pytest.approx(values[-1], rel=1e-9)


def test_similarities_follow_the_angle_between_targets_and_drop_negligible_ones() -> None:
    angles = np.array([0.0, 0.3, 1.0, np.pi])  # the last is 2.1 rad or more from all: below 1e-3
    weights = similarity_weights(targets(angles, P), gamma=0.1, min_weight=1e-3)
    assert weights == pytest.approx({(0, 1): np.exp((np.cos(0.3) - 1) / 0.1), (0, 2): np.exp((np.cos(1.0) - 1) / 0.1),
                                     (1, 2): np.exp((np.cos(0.7) - 1) / 0.1)})
