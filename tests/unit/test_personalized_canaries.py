"""Personalized-CD agents in an audit run (`canaries` M): what they plant, send and log, checked by hand.

Six agents of the paper's synthetic task in process (seeded samplers), p = 3 data coordinates and
M = 8 canary coordinates. A private run with a warm start: every update's logged input is its
gradient followed by L₀/m_i times its signs, the warm start's is zeros there, every model is p + M
long, and each broadcast's canary block is update (6) of the logged blocks it used. A non-private
run, where no noise hides the canaries: every block an agent logged is exactly the auditor's
canary model row times the canaries. An agent that skips clipping (a deliberate break) is caught
by the replay of its updates.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.empirical import planted_canaries
from coordinator_tools.audit.protocols.personalized_cd.replay_check import check_updates
from coordinator_tools.audit.records import MessageKey
from coordinator_tools.audit.replay import read_canary_signs, replay_run
from coordinator_tools.dataprep.personalized_task import PersonalizedTask, generate_task, task_topology, write_task
from node.breaks import Breaks
from node.codec import from_tensor
from node.noise import make_samplers
from node.personalized import AgentProblem
from node.protocols.personalized_cd import NOISE_PURPOSE, WARM_START_PURPOSE, PersonalizedCDParams
from node.topology import NetworkParams, Topology, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, LogContents, read_log

N, P, M, UPDATES, L0 = 6, 3, 8, 3, 0.3
SKIPS_CLIP = 4


def params(epsilon: float | None, **fields: object) -> PersonalizedCDParams:
    return PersonalizedCDParams(dimension=P, canaries=M, mu=1.0, lipschitz=L0, max_examples=100, updates=UPDATES,
                                epsilon=epsilon, delta=1e-5 if epsilon else 0.0, tick_rate=200.0, **fields)


def run(root: Path, task: PersonalizedTask, published: PersonalizedCDParams,
        breaks: dict[int, Breaks] | None = None) -> Topology:
    topology = task_topology(task, published, run_id=root.name,
                             network=NetworkParams(round_deadline_s=2.0, startup_deadline_s=2.0))
    save_topology(topology, root / "topology.json")
    write_task(task, root / "data")
    outcomes = asyncio.run(run_inprocess(topology, task.train, root, lambda v: make_samplers("simulation", 70 + v),
                                         breaks=breaks or {}))
    assert {outcome.steps_completed for outcome in outcomes.values()} == {UPDATES}
    return topology


def logs(root: Path, agent: int) -> tuple[LogContents, LogContents]:
    return read_log(root / f"node-{agent}" / VIEW_LOG_NAME), read_log(root / f"node-{agent}" / PRIVATE_LOG_NAME)


@pytest.fixture(scope="module")
def task() -> PersonalizedTask:
    return generate_task(N, P, seed=2)


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory, task: PersonalizedTask) -> tuple[Path, Topology]:
    root = tmp_path_factory.mktemp("private")
    return root, run(root, task, params(6.0, warm_start_epsilon=0.5))


def test_every_update_plants_the_agents_signs_at_half_its_sensitivity_and_the_warm_start_none(private, task):
    root, _ = private
    for agent in range(N):
        view, secret = logs(root, agent)
        (record,) = secret.of_kind("canaries")
        signs = from_tensor(record.signs)
        assert signs.shape == (M,) and set(np.abs(signs)) == {1.0}
        examples = len(task.train[agent].y)
        assert record.magnitude == pytest.approx(L0 / examples, rel=1e-15)  # half of 2 L0 / m_i
        warm, *updates = [from_tensor(entry.value) for entry in secret.of_kind("private_input")]
        assert len(updates) == UPDATES and np.array_equal(warm[P:], np.zeros(M))
        assert all(np.array_equal(update[P:], L0 / examples * signs) for update in updates)
        draws = secret.of_kind("noise")
        assert [draw.purpose for draw in draws] == [WARM_START_PURPOSE] + [NOISE_PURPOSE] * UPDATES
        assert all(np.count_nonzero(from_tensor(draw.value)[P:]) == M for draw in draws)  # the noise covers them
        assert {from_tensor(sent.payload).size for sent in view.of_kind("sent")} == {P + M}
        assert from_tensor(view.of_kind("final_output")[0].value).size == P + M


def test_each_broadcasts_canary_block_is_update_6_of_the_logged_blocks_it_used(private, task):
    root, topology = private
    for agent in range(N):
        view, secret = logs(root, agent)
        problem = AgentProblem.of(topology.protocol, topology, agent, task.train[agent])
        (record,) = secret.of_kind("canaries")
        canary = record.magnitude * from_tensor(record.signs)
        draws = {draw.step: from_tensor(draw.value)[P:] for draw in secret.of_kind("noise")
                 if draw.purpose == NOISE_PURPOSE}
        sent = {entry.sequence: from_tensor(entry.payload)[P:] for entry in view.of_kind("sent")}
        received = {(entry.peer, entry.sequence): from_tensor(entry.payload)[P:] for entry in view.of_kind("received")}
        for inputs in view.of_kind("step_inputs"):
            t = inputs.step
            used = {ref.peer: received[ref.peer, ref.sequence] for ref in inputs.inputs}
            mixed = sum(weight * used.get(peer, np.zeros(M)) for peer, weight in problem.weights.items())
            own = problem.step * problem.mu * problem.confidence
            expected = (1 - problem.step) * sent[t + 1] + problem.step * mixed - own * (canary + draws[t])
            assert sent[t + 2] == pytest.approx(expected, rel=1e-12, abs=1e-15)  # #1 the warm start, #t+2 update t


def test_without_noise_every_logged_canary_block_is_exactly_the_models_row(tmp_path: Path, task):
    run(tmp_path, task, params(None))
    replay = replay_run(tmp_path)
    coins, problems = read_canary_signs(tmp_path, replay.topology)
    assert not problems
    planted = planted_canaries({v: from_tensor(c.signs) for v, c in coins.items()},
                               {v: c.magnitude for v, c in coins.items()}, M)
    model = replay.auditor.canary_model(replay.realized, planted)
    canaries, _ = planted.values(N, 0.0)
    assert model.model.noise_rows.shape[1] == 0
    seen = set()
    for v in range(N):
        view, _ = logs(tmp_path, v)
        for entry in view.of_kind("received"):
            label = model.label_of(MessageKey.of(entry, entry.peer))
            j = model.labels.index(label)
            assert j in model.model.received[v]
            assert from_tensor(entry.payload)[P:] == pytest.approx(model.planted[j] @ canaries, rel=1e-9, abs=1e-15)
            seen.add(label)
    assert sorted(seen) == sorted(model.labels)


def test_an_agent_that_skips_clipping_is_caught_replaying_its_updates(tmp_path: Path, task):
    large = generate_task(N, P, seed=2)
    large.train[SKIPS_CLIP].x[:] *= 50.0  # gradients far above L0 in l1: clipping matters
    run(tmp_path, large, params(6.0), {SKIPS_CLIP: Breaks(skip_clip=True)})
    check = check_updates(replay_run(tmp_path, with_private_logs=True, data_dir=tmp_path / "data"))
    assert not check.ok
    assert {finding.node for finding in check.mismatches} == {SKIPS_CLIP}
