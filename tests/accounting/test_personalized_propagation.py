"""The private warm start smoothed by model propagation (AISTATS 2018 supplementary C), and its audit.

Step (16) is the exact block minimiser of objective (15), so repeating it over the agents is block
coordinate descent on a strongly convex quadratic: it converges to (15)'s closed-form minimiser,
Θ* = (D − W + μ D C)^{-1} μ D C Θ^loc, checked here by hand on a three-agent path. On the network,
the propagation steps read only released models (the agents' noisy warm starts and the
neighbours' broadcasts), so the audit charges the warm start and the updates and nothing for
propagation: two in-process runs of the same task and noise, without and with propagation, get
the same ε for every pair while their models differ, and the replay recomputes every propagation
broadcast from released models only.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.protocols.personalized_cd.canary_model import canary_model
from coordinator_tools.audit.protocols.personalized_cd.run import BroadcastRun
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.dataprep.personalized_task import generate_task, task_topology, write_task
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.learning import LocalData
from node.noise import make_samplers
from node.personalized import AgentProblem
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import NetworkParams, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import VIEW_LOG_NAME, read_log

N, P, UPDATES, EPSILON, WARM_EPSILON, STEPS = 12, 3, 3, 5.0, 0.5, 6
NETWORK = NetworkParams(round_deadline_s=5.0, startup_deadline_s=5.0)


def path_problems(mu: float, confidences: list[float], weights: dict[tuple[int, int], float]) -> list[AgentProblem]:
    """Agents on a weighted graph, each with only what step (16) reads: μ, c_i and W_ij / D_ii."""
    n = len(confidences)
    rows = [{j: w for (a, j), w in weights.items() if a == i} | {a: w for (a, j), w in weights.items() if j == i}
            for i in range(n)]
    return [AgentProblem(LocalData(np.zeros((1, 2)), np.zeros(1)), "logistic", mu, 1.0, confidences[i], 1.0, 1.0,
                         {j: w / sum(rows[i].values()) for j, w in rows[i].items()}, 1.0) for i in range(n)]


def test_propagation_converges_to_the_closed_form_minimiser_of_objective_15() -> None:
    mu, confidences, weights = 0.5, [1.0, 0.2, 0.6], {(0, 1): 2.0, (1, 2): 1.0}
    problems = path_problems(mu, confidences, weights)
    local = np.array([[1.0, -2.0], [0.0, 4.0], [3.0, 1.0]])  # the agents' released noisy local models
    # One step by hand: agent 1 (c = 0.2, neighbours 0 and 2 at 2/3 and 1/3) from the local models.
    step = problems[1].propagate(local[1], {0: local[0], 2: local[2]})
    assert step == pytest.approx(((2 / 3) * local[0] + (1 / 3) * local[2] + 0.1 * local[1]) / 1.1, rel=1e-12)
    w = np.zeros((3, 3))
    for (i, j), value in weights.items():
        w[i, j] = w[j, i] = value
    d = np.diag(w.sum(axis=1))
    pull = mu * d @ np.diag(confidences)
    closed_form = np.linalg.solve(d - w + pull, pull @ local)  # ∇Q_MP = (D − W)Θ + μDC(Θ − Θ^loc) = 0
    models = local.copy()
    for i in np.random.default_rng(0).integers(0, 3, 1000):  # a random wake-up order, as the Poisson clocks give
        models[i] = problems[i].propagate(local[i], {j: models[j] for j in problems[i].weights})
    assert models == pytest.approx(closed_form, abs=1e-12)
    assert not np.allclose(closed_form, local)


def test_propagation_needs_a_private_warm_start_and_pays_for_no_broadcast() -> None:
    base = {"dimension": 2, "mu": 1.0, "max_examples": 10, "updates": 3, "epsilon": 1.0}
    with pytest.raises(ValidationError, match="set warm_start_epsilon too"):
        PersonalizedCDParams(**base, warm_start_propagation=2)
    params = PersonalizedCDParams(**base, warm_start_epsilon=0.1, warm_start_propagation=2)
    assert (params.releases, params.spend_count, params.wakeups) == (6, 4, 5)
    assert [params.paid_release(sequence) for sequence in range(1, 7)] == [0, None, None, 1, 2, 3]
    assert [params.paid_releases(sequence) for sequence in range(7)] == [0, 1, 1, 1, 2, 3, 4]


def test_a_propagation_step_is_its_released_inputs_combined_with_no_canary_or_noise_of_its_own() -> None:
    params = PersonalizedCDParams(dimension=2, canaries=4, mu=2.0, lipschitz=0.3, max_examples=100, updates=1,
                                  epsilon=4.0, warm_start_epsilon=0.5, warm_start_propagation=1)
    topology = build_topology(generate("ring", n=3), graph_name="ring", run_id="hand", protocol=params)
    run = BroadcastRun(topology, spends={v: [0.5, 3.5] for v in range(3)},
                       views={0: frozenset({(1, 1), (2, 1)}), 1: frozenset({(0, 1), (2, 1)}),
                              2: frozenset({(0, 1), (1, 1), (0, 2), (0, 3)})},
                       sent={0: frozenset({1, 2, 3}), 1: frozenset({1}), 2: frozenset({1})},
                       used={0: {0: {1: 1, 2: 1}, 1: {}}, 1: {}, 2: {}})
    sizes = {0: 50, 1: 40, 2: 150}
    model = canary_model(run, sizes)
    owners, scales = model.model.owners, model.model.scales
    warm = {v: next(k for k in range(len(owners)) if owners[k] == v and math.isclose(
        scales[k], math.sqrt(2) * AgentProblem.sized(params, topology, v, sizes[v]).warm_start_sensitivity / 0.5))
            for v in range(3)}
    pull = 2.0 * 0.5  # μ c_0, c_0 = 50 / 100
    propagated = model.labels.index((0, 2))
    expected = np.zeros(len(owners))
    expected[warm[0]], expected[warm[1]], expected[warm[2]] = pull / (1 + pull), 0.5 / (1 + pull), 0.5 / (1 + pull)
    assert model.model.noise_rows[propagated] == pytest.approx(expected, rel=1e-12)
    assert model.planted[propagated] == pytest.approx(np.zeros(3), abs=0)
    update = model.labels.index((0, 3))  # update 0 starts from the propagated model, paid release 1
    alpha = 1.0 / (1.0 + pull * (0.25 + 2.0 / 50))
    assert model.planted[update] == pytest.approx([-alpha * pull, 0.0, 0.0], rel=1e-12)
    assert model.model.noise_rows[update][list(warm.values())] == pytest.approx((1 - alpha) * expected[
        list(warm.values())], rel=1e-12)


def run(root: Path, task, steps: int) -> dict[int, np.ndarray]:
    """The task's agents in process with seeded samplers (the same noise for every `steps`); the final models."""
    params = PersonalizedCDParams(dimension=P, mu=1.0, lipschitz=0.3, max_examples=100, updates=UPDATES,
                                  epsilon=EPSILON, delta=math.exp(-5), tick_rate=50.0,
                                  warm_start_epsilon=WARM_EPSILON, warm_start_propagation=steps)
    topology = task_topology(task, params, run_id=root.name, network=NETWORK)
    save_topology(topology, root / "topology.json")
    write_task(task, root / "data")
    outcomes = asyncio.run(run_inprocess(topology, task.train, root, lambda v: make_samplers("simulation", 70 + v)))
    assert {outcome.steps_completed for outcome in outcomes.values()} == {UPDATES}
    return {v: outcome.estimate for v, outcome in outcomes.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    task = generate_task(N, P, seed=5)
    roots = {steps: tmp_path_factory.mktemp(f"propagation{steps}") for steps in (0, STEPS)}
    models = {steps: run(root, task, steps) for steps, root in roots.items()}
    reports = {steps: audit_run(root, root / "audit", AuditOptions(data=root / "data", with_private_logs=True,
                                                                    attack_pairs="none"))
               for steps, root in roots.items()}
    return roots, models, reports


def test_propagation_changes_the_models_but_not_the_audited_epsilon(runs) -> None:
    roots, models, reports = runs
    assert max(np.abs(models[0][v] - models[STEPS][v]).max() for v in range(N)) > 1e-3
    columns = ["paper_eps", "exact_eps"]
    without, with_propagation = read_pairs(roots[0] / "audit", columns), read_pairs(roots[STEPS] / "audit", columns)
    for column in columns:
        assert np.all(np.isfinite(without[column]))
        assert with_propagation[column] == pytest.approx(without[column], rel=1e-12)
    for report in reports.values():
        assert all(check["ok"] for check in report["checks"]), report["checks"]
        assert "transcript reproduces the logged payloads" in [check["name"] for check in report["checks"]]
        assert [agent["updates"] for agent in report["personalized"]["agents"]] == [UPDATES] * N
    for v in range(N):  # the same spends, P more broadcasts: propagation pays nothing
        view = read_log(roots[STEPS] / f"node-{v}" / VIEW_LOG_NAME)
        assert [record.step for record in view.of_kind("budget")] == list(range(UPDATES + 1))
        assert {record.sequence for record in view.of_kind("sent")} == set(range(1, UPDATES + STEPS + 2))
        assert [record.step for record in view.of_kind("step_inputs")] == list(range(STEPS + UPDATES))
