"""A personalized-CD agent's own budget (`--budget`, at most the published one) and its restart (`--resume`).

In process, on the paper's synthetic task with 4 agents: an agent crashes as its update 2 starts and is
restarted on its log folder. The restart rebuilds its ledger from every logged spend, its model from its
last broadcast and its neighbours' models from its view, and appends to its logs; one with another
budget is refused and leaves the logs as they were. The auditor holds an agent to the budget its
header declares when that is the stricter. An agent that dies after paying for update 2 (before
its gradient, its draw or its broadcast is logged) and resumes passes the audit's replay of every
update: the resumed one starts from its last logged broadcast, as the agent did.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.protocols.personalized_cd import PersonalizedCDAuditor, budget_check
from coordinator_tools.audit.protocols.personalized_cd.replay_check import check_updates
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.dataprep.personalized_task import generate_task, task_topology, write_task
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node import cli
from node.agent_budget import BudgetRequest, header_fields, logged_budget, own_parameters, parse_budget
from node.agent_progress import read_progress
from node.budget import BudgetExhausted, BudgetLedger, within
from node.codec import from_tensor
from node.context import ProtocolContext
from node.errors import ConfigError, LogResumeError
from node.host import NodeHost
from node.journal import Journal
from node.noise import NodeSamplers, make_samplers
from node.protocols.muffliato import MuffliatoParams
from node.protocols.personalized_cd import MODEL, PersonalizedCDParams
from node.topology import NetworkParams, Topology, save_topology
from node.transport.inprocess import InProcessLink, run_inprocess
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, ViewLogWriter, read_log
from tests.scripted import Crash, DiesDrawing

N, P, UPDATES, EPSILON, DELTA = 4, 3, 4, 4.0, 1e-5
CRASHED, CRASHED_AT = 2, 2
CANARIES = 64  # an audit run's: 2^-64, the chance that fresh signs equal the logged ones
PARAMS = PersonalizedCDParams(dimension=P, mu=1.0, lipschitz=0.3, max_examples=100, updates=UPDATES,
                              epsilon=EPSILON, delta=DELTA, tick_rate=200.0)
NETWORK = NetworkParams(round_deadline_s=2.0, startup_deadline_s=2.0)


def view_of(root: Path, node: int = CRASHED) -> Path:
    return root / f"node-{node}" / VIEW_LOG_NAME


def logs_bytes(root: Path) -> tuple[bytes, bytes]:
    return view_of(root).read_bytes(), (root / f"node-{CRASHED}" / PRIVATE_LOG_NAME).read_bytes()


def dies_in(monkeypatch: pytest.MonkeyPatch, method: str, when: Callable[..., bool]) -> None:
    """Agent CRASHED's process dies as it calls ProtocolContext.`method` with arguments for which `when` holds."""
    original = getattr(ProtocolContext, method)

    async def dying(context: ProtocolContext, *args: object, **kwargs: object) -> object:
        if context.node_id == CRASHED and when(*args):
            raise Crash
        return await original(context, *args, **kwargs)

    monkeypatch.setattr(ProtocolContext, method, dying)


@pytest.fixture(params=["before its gradient is logged", "before its draw", "before its broadcast"])
def paid_then_crashed(request: pytest.FixtureRequest, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Topology, list, str]:
    """The task's agents in process (data in tmp_path/data); agent CRASHED dies in update CRASHED_AT after its
    budget record, at the point the parameter names (returned last); the others finish."""
    task = generate_task(N, P, seed=0)
    topology = task_topology(task, PARAMS, run_id="paid-then-crashed", network=NETWORK)
    save_topology(topology, tmp_path / "topology.json")
    write_task(task, tmp_path / "data")
    with monkeypatch.context() as patch:
        if request.param == "before its gradient is logged":
            gradients = itertools.count()
            dies_in(patch, "contribution", lambda value, clipped: next(gradients) == CRASHED_AT)
        elif request.param == "before its broadcast":
            dies_in(patch, "broadcast", lambda to, message, *rest: message.id.sequence == CRASHED_AT + 1)

        def samplers(v: int) -> NodeSamplers:
            own = make_samplers("simulation", v)
            dying = v == CRASHED and request.param == "before its draw"
            return dataclasses.replace(own, laplace=DiesDrawing(own.laplace, at=CRASHED_AT)) if dying else own

        outcomes = asyncio.run(run_inprocess(topology, task.train, tmp_path, samplers, return_exceptions=True))
    assert isinstance(outcomes[CRASHED], Crash)
    assert all(outcomes[v].steps_completed == UPDATES for v in range(N) if v != CRASHED)
    spends = read_log(view_of(tmp_path)).of_kind("budget")
    assert [spend.step for spend in spends] == list(range(CRASHED_AT + 1))  # update CRASHED_AT was paid for
    return tmp_path, topology, task.train, request.param


def crash(tmp_path: Path, params: PersonalizedCDParams) -> tuple[Path, Topology, list]:
    """The task's agents in process; agent CRASHED dies as its update CRASHED_AT starts, the others finish."""
    task = generate_task(N, P, seed=0)
    topology = task_topology(task, params, run_id="restart", network=NETWORK)
    save_topology(topology, tmp_path / "topology.json")

    async def crash(node: int, step: int) -> None:
        if (node, step) == (CRASHED, CRASHED_AT):
            raise Crash

    outcomes = asyncio.run(run_inprocess(topology, task.train, tmp_path, lambda v: make_samplers("simulation", v),
                                         on_step=crash, return_exceptions=True))
    assert isinstance(outcomes[CRASHED], Crash)
    assert all(outcomes[v].steps_completed == UPDATES for v in range(N) if v != CRASHED)
    return tmp_path, topology, task.train


@pytest.fixture
def crashed(tmp_path: Path) -> tuple[Path, Topology, list]:
    return crash(tmp_path, PARAMS)


def restart(root: Path, topology: Topology, train: list, **options: object) -> NodeHost:
    """Agent CRASHED started again on its log folder (its neighbours are gone), unseeded: no noise drawn twice."""
    samplers = make_samplers("simulation")
    return NodeHost(topology, CRASHED, train[CRASHED], samplers.gaussian, root / f"node-{CRASHED}",
                    lambda peer: InProcessLink(CRASHED, None), laplace=samplers.laplace, network=NETWORK,
                    resume=True, **options)


async def run_alone(host: NodeHost):
    try:
        return await host.run()
    finally:
        await host.close()


def test_the_ledger_of_a_restart_counts_every_logged_spend(tmp_path: Path) -> None:
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    logged = [viewlog_pb2.BudgetSpent(step=0, epsilon=1.0), viewlog_pb2.BudgetSpent(step=1, epsilon=0.5)]
    ledger = BudgetLedger.resumed(journal, 2.0, 0.0, logged)

    async def spend_the_rest() -> None:
        await ledger.spend(2, 0.5)
        with pytest.raises(BudgetExhausted, match="step 3"):
            await ledger.spend(3, 1e-6)

    try:
        assert ledger.spent == (1.0, 0.5) and ledger.affords(0.5) and not ledger.affords(0.6)
        asyncio.run(spend_the_rest())
    finally:
        journal.close()
    assert [spend.step for spend in read_log(tmp_path / VIEW_LOG_NAME).of_kind("budget")] == [2]


def test_a_restarted_agent_goes_on_from_its_log_and_never_exceeds_its_budget(crashed) -> None:
    root, topology, train = crashed
    progress = read_progress(read_log(view_of(root)), MODEL)
    assert progress.updates == CRASHED_AT and len(progress.spends) == CRASHED_AT
    last_broadcast = read_log(view_of(root)).of_kind("sent")[-1]
    assert last_broadcast.sequence == CRASHED_AT and np.array_equal(progress.model,
                                                                     from_tensor(last_broadcast.payload))
    heard = {peer: max(latest.sequence for sender, latest in progress.received if sender == peer)
             for peer, _ in progress.received}

    outcome = asyncio.run(run_alone(restart(root, topology, train)))
    assert outcome.steps_completed == UPDATES
    contents = read_log(view_of(root))
    assert contents.damage is None and [r.WhichOneof("kind") for r in contents.records].count("header") == 1
    spends = contents.of_kind("budget")
    assert [spend.step for spend in spends] == list(range(UPDATES))
    assert within([spend.epsilon for spend in spends], EPSILON, DELTA)
    resumed_inputs = {ref.peer: ref.sequence for ref in contents.of_kind("step_inputs")[CRASHED_AT].inputs}
    assert resumed_inputs == heard  # the neighbours' models it had logged, not their initial zeros
    private = read_log(root / f"node-{CRASHED}" / PRIVATE_LOG_NAME)
    assert [draw.step for draw in private.of_kind("noise")] == list(range(UPDATES))
    check = budget_check(replay_run(root))
    assert check.ok, check.detail
    with pytest.raises(LogResumeError, match="run is over"):
        restart(root, topology, train)


def test_an_agent_resumed_after_paying_for_an_update_it_never_released_passes_the_replay(paid_then_crashed) -> None:
    root, topology, train, crash_point = paid_then_crashed
    assert not [record for record in read_log(view_of(root)).of_kind("sent") if record.sequence > CRASHED_AT]
    outcome = asyncio.run(run_alone(restart(root, topology, train)))
    assert outcome.steps_completed == UPDATES
    contents = read_log(view_of(root))
    assert [spend.step for spend in contents.of_kind("budget")] == list(range(UPDATES))  # the lost update counts
    assert sorted({record.sequence for record in contents.of_kind("sent")}) == [
        update + 1 for update in range(UPDATES) if update != CRASHED_AT]
    replay = replay_run(root, with_private_logs=True, data_dir=root / "data")
    check = check_updates(replay)
    assert check.ok, check.mismatches
    gradients = read_log(root / f"node-{CRASHED}" / PRIVATE_LOG_NAME).of_kind("private_input")
    assert len(gradients) == UPDATES - (crash_point == "before its gradient is logged")
    broadcasts = sum(len(log.sent) for log in replay.logs.values())
    assert check.compared == broadcasts + len(gradients) + (N - 1) * UPDATES  # every broadcast and every gradient
    assert budget_check(replay).ok


def test_a_restarted_agent_plants_the_canaries_its_private_log_holds_never_fresh_ones(tmp_path: Path) -> None:
    root, topology, train = crash(tmp_path, PARAMS.model_copy(update={"canaries": CANARIES}))
    private = root / f"node-{CRASHED}" / PRIVATE_LOG_NAME
    (before,) = read_log(private).of_kind("canaries")
    coins = make_samplers("simulation").coins  # it could draw fresh signs: it must not
    assert asyncio.run(run_alone(restart(root, topology, train, coins=coins))).steps_completed == UPDATES
    (after,) = read_log(private).of_kind("canaries")  # logged once, before the crash
    signs = from_tensor(before.signs)
    assert after == before and signs.shape == (CANARIES,)
    inputs = [from_tensor(entry.value) for entry in read_log(private).of_kind("private_input")]
    assert len(inputs) == UPDATES and all(np.array_equal(x[P:], before.magnitude * signs) for x in inputs)
    report = audit_run(root, root / "audit", AuditOptions(attack_pairs="none"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    assert report["canaries"]["pairs"] == N * (N - 1) and not report["canaries"]["values_outside_the_model"]


def test_a_restart_with_another_budget_is_refused_and_touches_no_log(crashed) -> None:
    root, topology, train = crashed
    before = logs_bytes(root)
    with pytest.raises(LogResumeError, match="agent_budget"):
        restart(root, topology, train, budget=BudgetRequest(EPSILON / 2))
    with pytest.raises(ConfigError, match="above node 2's published budget"):
        restart(root, topology, train, budget=BudgetRequest(EPSILON * 2))
    assert logs_bytes(root) == before


def test_the_own_budget_lowers_only_that_agent_and_keeps_the_published_delta() -> None:
    own = own_parameters(PARAMS, 1, BudgetRequest(2.0))
    assert own.budget_of(1) == (2.0, DELTA) and own.budget_of(0) == PARAMS.budget_of(0) == (EPSILON, DELTA)
    assert own.release_epsilons(1, N)[0] < PARAMS.release_epsilons(1, N)[0]
    assert own_parameters(PARAMS, 1, BudgetRequest(EPSILON, 0.0)).budget_of(1) == (EPSILON, 0.0)
    assert own_parameters(PARAMS, 1, None) is PARAMS
    assert logged_budget(viewlog_pb2.RunHeader(public_parameters_json=json.dumps(header_fields(own, 1)))) == (2.0,
                                                                                                          DELTA)
    for larger in (BudgetRequest(EPSILON * 1.01), BudgetRequest(1.0, DELTA * 2)):
        with pytest.raises(ConfigError, match="may only lower it"):
            own_parameters(PARAMS, 1, larger)
    with pytest.raises(ConfigError, match="non-private"):
        own_parameters(PARAMS.model_copy(update={"epsilon": None}), 1, BudgetRequest(1.0))
    with pytest.raises(ConfigError, match="muffliato has none to lower"):
        own_parameters(MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=2, dimension=1), 1,
                       BudgetRequest(1.0))


@pytest.mark.parametrize(("text", "request_"), [("2", BudgetRequest(2.0)), ("2,1e-5", BudgetRequest(2.0, 1e-5))])
def test_the_budget_flag_reads_epsilon_and_an_optional_delta(text: str, request_: BudgetRequest) -> None:
    assert parse_budget(text) == request_


@pytest.mark.parametrize("text", ["x", "0", "inf", "2,1", "2,-0.1", "2,x"])
def test_a_malformed_budget_flag_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_budget(text)


def test_an_agent_with_a_lower_budget_spends_within_it_and_the_audit_holds_it_to_it(tmp_path: Path) -> None:
    task = generate_task(N, P, seed=0)
    topology = task_topology(task, PARAMS, run_id="lower", network=NETWORK)
    save_topology(topology, tmp_path / "topology.json")
    samplers = make_samplers("secure")
    host = NodeHost(topology, 1, task.train[1], samplers.gaussian, tmp_path / "node-1",
                    lambda peer: InProcessLink(1, None), laplace=samplers.laplace, budget=BudgetRequest(2.0))
    assert asyncio.run(run_alone(host)).steps_completed == UPDATES
    contents = read_log(view_of(tmp_path, 1))
    assert logged_budget(contents.header) == (2.0, DELTA)
    assert within([spend.epsilon for spend in contents.of_kind("budget")], 2.0, DELTA)
    assert budget_check(replay_run(tmp_path)).ok
    declared = viewlog_pb2.RunHeader()  # the same spends, declared under a budget they do not fit
    declared.CopyFrom(contents.header)
    declared.public_parameters_json = json.dumps(json.loads(declared.public_parameters_json)
                                                 | {"agent_budget": {"epsilon": 1.0, "delta": DELTA}})
    view_of(tmp_path, 1).unlink()
    with ViewLogWriter(view_of(tmp_path, 1), declared) as log:
        log.append_many(contents.records[1:])
    check = budget_check(replay_run(tmp_path))
    assert not check.ok and "its budget 1" in check.detail


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A personalized-CD topology (budget EPSILON) and a Muffliato one, with a data file for the latter."""
    task = generate_task(N, P, seed=0)
    save_topology(task_topology(task, PARAMS, run_id="cli"), tmp_path / "pcd.json")
    muffliato = build_topology(generate("ring", n=4), graph_name="ring", run_id="cli-muffliato",
                               protocol=MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=2, dimension=2))
    save_topology(muffliato, tmp_path / "muffliato.json")
    write_node_files(synthetic_values(4, 2, 1.0, 0), tmp_path / "data")
    return {"pcd": tmp_path / "pcd.json", "muffliato": tmp_path / "muffliato.json", "data": tmp_path / "data"}


@pytest.mark.parametrize(("topology", "flags", "says"), [
    ("pcd", ["--budget", "5"], "above node 0's published budget (4,1e-05)"),
    ("pcd", ["--budget", "4,0.001"], "above node 0's published budget"),
    ("pcd", ["--resume", "--sampler", "simulation", "--sim-seed", "3"], "--resume does not go with --sim-seed"),
    ("muffliato", ["--budget", "1"], "muffliato has none to lower"),
    ("muffliato", ["--resume"], "a muffliato node does not rejoin its run"),
])
def test_the_node_refuses_in_one_line_before_it_logs_anything(files: dict[str, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str], topology: str,
                                                              flags: list[str], says: str) -> None:
    code = cli.main(["--topology", str(files[topology]), "--id", "0", "--data", str(files["data"] / "node-0.json"),
                     "--log-dir", str(tmp_path / "log"), "--insecure", *flags])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and error.startswith("netdp-node: error: ") and says in error, error
    assert not (tmp_path / "log" / VIEW_LOG_NAME).exists()


def test_the_private_log_check_allows_an_update_a_crash_left_without_its_draw():
    """A resumed agent skips the update it paid for but never drew: steps rise with a gap, never repeat."""
    def draws(*steps: int) -> tuple[viewlog_pb2.NoiseDraw, ...]:
        return tuple(viewlog_pb2.NoiseDraw(step=step, purpose="gradient", mechanism="laplace") for step in steps)

    auditor = PersonalizedCDAuditor()
    assert auditor.private_problem(draws(0, 1, 3)) is None
    assert auditor.inputs_problem(4, draws(0, 1, 3)) is None
    assert auditor.private_problem(draws(0, 2, 1)) is not None
    assert auditor.private_problem(draws(0, 1, 1)) is not None
    assert auditor.inputs_problem(2, draws(0, 1, 3)) is not None
