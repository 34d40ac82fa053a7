"""Personalized CD on the paper's synthetic task (n = 100 agents) in process, and its audit.

One private run (ε̄ = 5, δ̄ = e^-5, 5 updates per agent) and one non-private run of the same
task and topology, through the in-process transport with seeded samplers: purely local models
< private CD < non-private CD in mean test accuracy. The private run's audit recomputes every
agent's spend from its logged ε_t, checks that nobody overspent, and catches an agent whose log
releases a model it did not pay for or pays more than its budget. A third, smaller private run
publishes Prop. 2's schedule and a private warm start: its audit counts the warm start's release
with the updates', each at its logged ε, and every agent's total stays within its budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.checks import Check
from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.protocols.personalized_cd import budget_check as personalized_budget_check
from coordinator_tools.audit.protocols.personalized_cd.accountant import laplace_rdp, pld_epsilon
from coordinator_tools.audit.protocols.personalized_cd.simulate import accuracies, local_model
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.dataprep.personalized_task import generate_task, task_topology, write_task
from netdp.v1 import viewlog_pb2
from node.budget import theorem1_epsilon
from node.codec import from_tensor
from node.noise import make_samplers
from node.personalized import AgentProblem
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import NetworkParams, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, ViewLogWriter, read_log

N, P, UPDATES, EPSILON, DELTA = 100, 5, 5, 5.0, math.exp(-5)
NETWORK = NetworkParams(round_deadline_s=5.0, startup_deadline_s=5.0)


def paper_params(epsilon: float | None, **fields: object) -> PersonalizedCDParams:
    return PersonalizedCDParams(dimension=P, mu=1.0, lipschitz=0.3, max_examples=100, updates=UPDATES,
                                epsilon=epsilon, delta=DELTA if epsilon else 0.0, tick_rate=20.0, **fields)


def run(root: Path, task, params: PersonalizedCDParams) -> dict[int, np.ndarray]:
    """The task's agents in process (seeded samplers), their logs in root; the final models."""
    topology = task_topology(task, params, run_id=root.name, network=NETWORK)
    save_topology(topology, root / "topology.json")
    write_task(task, root / "data")
    outcomes = asyncio.run(run_inprocess(topology, task.train, root, lambda v: make_samplers("simulation", 50 + v)))
    assert {outcome.steps_completed for outcome in outcomes.values()} == {UPDATES}
    return {v: outcome.estimate for v, outcome in outcomes.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    task = generate_task(N, P, seed=0)
    private_root, plain_root = tmp_path_factory.mktemp("private"), tmp_path_factory.mktemp("non_private")
    return task, private_root, run(private_root, task, paper_params(EPSILON)), run(plain_root, task, paper_params(None))


def mean_accuracy(task, models: Sequence[np.ndarray]) -> float:
    return float(accuracies(models, task.test, "logistic").mean())


def test_private_cd_sits_between_purely_local_models_and_non_private_cd(runs) -> None:
    task, _, private, plain = runs
    topology = task_topology(task, paper_params(EPSILON), run_id="local")
    local = [local_model(AgentProblem.of(topology.protocol, topology, v, task.train[v])) for v in range(N)]
    accuracy = {"local": mean_accuracy(task, local), "private": mean_accuracy(task, [private[v] for v in range(N)]),
                "non_private": mean_accuracy(task, [plain[v] for v in range(N)])}
    assert accuracy["local"] + 0.01 < accuracy["private"] < accuracy["non_private"] - 0.005, accuracy


def test_the_audit_reads_every_spend_finds_no_overspending_and_reports_the_three_accuracies(runs) -> None:
    task, root, private, _ = runs
    report = audit_run(root, root / "audit", AuditOptions(data=root / "data", with_private_logs=True,
                                                          attack_pairs="none"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    assert any(check["name"] == "no agent spent beyond its budget" for check in report["checks"])
    assert not any("sigma" in check["name"] for check in report["checks"])  # no σ to double: its noise is a budget
    agents = report["personalized"]["agents"]
    assert [agent["updates"] for agent in agents] == [UPDATES] * N
    assert all(agent["epsilon_sum"] == pytest.approx(EPSILON) and agent["within_budget"] for agent in agents)
    assert all(agent["pld"] < agent["theorem1"] <= EPSILON * (1 + 1e-9) for agent in agents)
    steps = [1.0] * UPDATES  # Thm 1 splits 5 over 5 updates at delta e^-5 into 1 each: the plain sum is smallest
    pairs = read_pairs(root / "audit", ["paper_eps", "exact_eps", "exact_rdp", "ldp_rdp"])
    assert len(pairs["exact_eps"]) == N * (N - 1)
    assert pairs["paper_eps"] == pytest.approx(np.full(N * (N - 1), theorem1_epsilon(steps, 1e-5)))
    assert pairs["exact_eps"] == pytest.approx(np.full(N * (N - 1), pld_epsilon(steps, 1e-5)))
    assert pairs["exact_rdp"] == pytest.approx(np.full(N * (N - 1), laplace_rdp(steps, 2.0)))
    assert np.array_equal(pairs["exact_rdp"], pairs["ldp_rdp"])
    # the same number for every observer: the composition of every release, an upper bound for one that sees fewer
    assert report["column_definitions"]["exact"].startswith("upper bound: the composition of all the source's")
    assert all(pair["exact"]["eps_upper"] == pair["exact"]["eps"] for pair in report["pairs"])
    assert "<h2>Columns</h2>" in (root / "audit" / "index.html").read_text()
    utility = report["utility"]
    assert utility["run"] == utility["private"] == pytest.approx(mean_accuracy(task, [private[v] for v in range(N)]))
    assert utility["local"] < utility["private"] < utility["non_private"]
    curve = utility["budget_curve"]
    assert curve["private"][0] < utility["local"] < curve["private"][-1]  # eps 0.5 is worse, eps 20 better
    assert (root / "audit" / "accuracy_vs_budget.png").is_file()
    page = (root / "audit" / "index.html").read_text(encoding="utf-8")
    assert "<h2>Personalized learning</h2>" in page and f"<tr><td>{N - 1}</td><td>{UPDATES}</td><td>5</td>" in page
    assert '<span class="fail">NO</span>' not in page


def rewrite(path: Path, change: Callable[[list[viewlog_pb2.Record]], list[viewlog_pb2.Record]]) -> None:
    """Write a view log again with its records (header kept) changed."""
    contents = read_log(path)
    path.unlink()
    with ViewLogWriter(path, contents.header) as log:
        log.append_many(change(list(contents.records[1:])))


@contextlib.contextmanager
def restored(path: Path) -> Iterator[list[viewlog_pb2.Record]]:
    """The view log's records (header aside) for the block to rewrite, written back as they were afterwards."""
    original = list(read_log(path).records[1:])
    try:
        yield original
    finally:
        rewrite(path, lambda records: list(original))


def without_spend(step: int) -> Callable[[list[viewlog_pb2.Record]], list[viewlog_pb2.Record]]:
    """A log change that drops the budget record of `step`."""
    return lambda records: [r for r in records if not (r.WhichOneof("kind") == "budget" and r.budget.step == step)]


def budget_check(root: Path) -> Check:
    return personalized_budget_check(replay_run(root))


def test_a_release_without_its_logged_spend_fails_the_budget_check(runs) -> None:
    _, root, _, _ = runs
    log = root / "node-7" / VIEW_LOG_NAME
    with restored(log) as original:
        rewrite(log, without_spend(4))
        check = budget_check(root)
        assert not check.ok and "node 7 released 5 models but logged the spend of 4" in check.detail
        rewrite(log, lambda records: [_inflated(r) for r in original])
        check = budget_check(root)
        assert not check.ok and "node 7: Thm 1 gives 6 > its budget 5" in check.detail
    assert budget_check(root).ok


def _inflated(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
    """Step 0's spend logged at 2 instead of 1: the composition becomes 6."""
    if record.WhichOneof("kind") == "budget" and record.budget.step == 0:
        changed = viewlog_pb2.Record()
        changed.CopyFrom(record)
        changed.budget.epsilon = 2.0
        return changed
    return record


def test_the_accountants_match_dp_accounting_and_the_pure_sum() -> None:
    assert pld_epsilon([1.0] * 5, 0.0) == 5.0 and pld_epsilon([], 1e-5) == 0.0
    assert pld_epsilon([0.01] * 100, 1e-5) < theorem1_epsilon([0.01] * 100, 1e-5) < 1.0
    eps, alpha = 0.7, 3.0  # Mironov (2017) Prop. 6: the Laplace mechanism's RDP
    expected = math.log(alpha / (2 * alpha - 1) * math.exp((alpha - 1) * eps)
                        + (alpha - 1) / (2 * alpha - 1) * math.exp(-alpha * eps)) / (alpha - 1)
    assert laplace_rdp([eps, eps], alpha) == pytest.approx(2 * expected, rel=1e-9)
    assert math.isinf(pld_epsilon([math.inf], 1e-5)) and math.isinf(laplace_rdp([math.inf], 2.0))


N_WARM, WARM_EPSILON, CURVATURE = 30, 0.5, 0.3


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory: pytest.TempPathFactory):
    """30 agents with Prop. 2's schedule and a private warm start at ε_ws = 0.5, paid from ε̄ = 5."""
    task, root = generate_task(N_WARM, P, seed=3), tmp_path_factory.mktemp("warm_start")
    params = paper_params(EPSILON, budget_split="proposition2", curvature_ratio=CURVATURE,
                          warm_start_epsilon=WARM_EPSILON)
    run(root, task, params)
    return task, root, params


def test_the_audit_counts_the_warm_start_with_the_updates_within_every_budget(warm_run) -> None:
    _, root, params = warm_run
    schedule = params.release_epsilons(0, N_WARM)
    assert len(schedule) == UPDATES + 1 and schedule[0] == WARM_EPSILON
    assert np.all(np.diff(schedule[1:]) < 0) and theorem1_epsilon(schedule, DELTA) == pytest.approx(EPSILON)
    report = audit_run(root, root / "audit", AuditOptions(data=root / "data", with_private_logs=True,
                                                          attack_pairs="none"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]  # the replay of every release included
    assert "transcript reproduces the logged payloads" in [check["name"] for check in report["checks"]]
    for agent in report["personalized"]["agents"]:
        view = read_log(root / f"node-{agent['node']}" / VIEW_LOG_NAME)
        logged = [record.epsilon for record in view.of_kind("budget")]
        assert logged == pytest.approx(schedule, rel=1e-12) and agent["planned_epsilons"] == list(schedule)
        assert agent["updates"] == UPDATES and agent["epsilon_sum"] == pytest.approx(sum(schedule))
        assert agent["within_budget"] and agent["theorem1"] == pytest.approx(EPSILON, rel=1e-9)
    pairs = read_pairs(root / "audit", ["paper_eps", "exact_eps"])
    assert pairs["paper_eps"] == pytest.approx(np.full(N_WARM * (N_WARM - 1), theorem1_epsilon(schedule, 1e-5)))
    assert pairs["exact_eps"] == pytest.approx(np.full(N_WARM * (N_WARM - 1), pld_epsilon(schedule, 1e-5)))


def test_each_agent_pays_its_warm_start_then_draws_it_at_its_sensitivity_then_broadcasts_it_first(warm_run) -> None:
    task, root, params = warm_run
    topology = task_topology(task, params, run_id="local")
    for v in range(N_WARM):
        agent = AgentProblem.of(params, topology, v, task.train[v])
        public, private = read_log(root / f"node-{v}" / VIEW_LOG_NAME).records[1:], read_log(
            root / f"node-{v}" / PRIVATE_LOG_NAME)
        kinds = [record.WhichOneof("kind") for record in public]
        first_sent = kinds.index("sent")
        assert kinds.index("budget") < first_sent and public[kinds.index("budget")].budget.step == 0
        assert public[first_sent].sent.sequence == 1 and "step_inputs" not in kinds[:first_sent]
        assert sorted({record.sent.sequence for record in public if record.WhichOneof("kind") == "sent"}) == list(
            range(1, UPDATES + 2))
        draw = private.of_kind("noise")[0]
        assert (draw.purpose, draw.step) == ("warm_start", 0)
        assert draw.scale * WARM_EPSILON == pytest.approx(agent.warm_start_sensitivity, rel=1e-12)
        local = private.of_kind("private_input")[0]
        assert from_tensor(local.value) == pytest.approx(agent.local_model(), abs=1e-12)
        assert from_tensor(public[first_sent].sent.payload) == pytest.approx(
            from_tensor(local.value) + from_tensor(draw.value), rel=1e-12)


def test_a_warm_start_released_without_its_logged_spend_fails_the_budget_check(warm_run) -> None:
    _, root, _ = warm_run
    log = root / "node-4" / VIEW_LOG_NAME
    with restored(log):
        rewrite(log, without_spend(0))
        check = budget_check(root)
        assert not check.ok and "node 4 logged the spend of step 1 after 0 spends" in check.detail
    assert budget_check(root).ok
