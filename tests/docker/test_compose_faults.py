"""Faults injected into a real docker-compose cluster, from the host, while the nodes run.

Each test starts its own 8-node hypercube (mutual TLS, secure sampler, sigma > 0; its own
compose project and folder), lets it run, and then does to one node what production does:

* SIGKILL (`docker kill -s KILL`): the survivors finish without it, its log stays readable
  up to the kill, its neighbours log it as dropped every round after, the audit accounts it.
* a network cut (`docker network disconnect`, later `connect`): every node finishes, the
  cut shows as drop-outs on both sides, and once reconnected the nodes get back in step.
* a restart (`docker restart`): SIGTERM stops the node gracefully (exit 3); the restarted
  process refuses to rejoin (exit 2, "does not rejoin") and leaves the first process's logs
  exactly as they were.
* one slow link (150 ms each way between nodes 0 and 1, within the deadline): nobody is
  dropped, every estimate is the noisy average, and the logs show the delay on that link only.

In every scenario no log record may be lost or corrupted: every log that was not SIGKILLed
reads back undamaged, and `netdp audit --with-private-logs` (every message a sender saw
delivered is in the receiver's log; every node's values recomputed along the realized
schedule) passes all its checks, with exactly the logged drop-outs in its schedule.

Timing: deadline 1 s, 120 rounds of ~0.05 s while all is well. The host acts when the node's
log shows round 8 (10 for the kill); docker takes up to a second or two to act on a busy
machine, so the fault lands some 2 to 40 rounds later, well before the end. From then on each
round costs the faulty node's neighbours a few tenths of a second (the refused connection is
retried, then the node is dropped), so a scenario runs for about a minute.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME
from tests.docker.cluster_control import (
    ComposeCluster,
    ComposeRun,
    assert_estimates_are_noisy_mean,
    audit_cleanly,
    make_compose_cluster,
    read_node_log,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

ROUNDS = 120
SIGMA = 0.05
ROUND_DEADLINE_S = 1.0
FAULT_ROUND = 8  # the round the host waits for before it acts
START_TIMEOUT_S = 120.0  # containers start and reach FAULT_ROUND
RUN_TIMEOUT_S = 400.0  # fault to last exit: tenths of a second a round, ROUNDS deadlines at worst
# A neighbour that acknowledged our value is waited for up to patience_factor (5) deadlines, so
# a shorter cut may end before the cut-off node logs any drop-out: this one outlasts it by 3 rounds.
CUT_S = 8.0
LINK_DELAY_MS = 150.0
KILLED = 3
CUT = 5
RESTARTED = 2
SLOW_LINK = (0, 1)
EXIT_SIGKILL = 137
EXIT_STOPPED = 3  # node.cli: stopped by SIGTERM before the run completed
EXIT_ERROR = 2  # node.cli: a NetdpError, here the refusal to rejoin


@pytest.fixture
def cluster_run(node_image: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ComposeRun]:
    """A fresh cluster in this test's folder, as its own compose project (not started); torn down after."""
    scenario = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    cluster = make_compose_cluster(tmp_path, node_image, run_id=scenario, sigma=SIGMA,
                                   protocol=("--protocol", "muffliato", "--rounds", str(ROUNDS)),
                                   round_deadline_s=ROUND_DEADLINE_S)
    with ComposeRun(cluster, f"netdp-{scenario}-{os.getpid()}") as run:
        yield run


# --- what the logs say -----------------------------------------------------------------------


def exit_codes(containers: dict[str, dict]) -> dict[str, int]:
    return {name: container["State"]["ExitCode"] for name, container in sorted(containers.items())}


def expected_exit_codes(run: ComposeRun, special: dict[int, int] | None = None) -> dict[str, int]:
    """By service: the exit code given for a node in `special`, 0 for every other node."""
    return {run.cluster.service(v): (special or {}).get(v, 0) for v in run.nodes}


def assert_logs_undamaged(cluster: ComposeCluster, nodes: list[int] | range) -> None:
    for v in nodes:
        for name in (VIEW_LOG_NAME, PRIVATE_LOG_NAME):
            log = read_node_log(cluster, v, name)
            assert log.damage is None and log.header is not None, f"node {v} {name}: {log.damage}"


def drop_outs(cluster: ComposeCluster, node: int) -> dict[tuple[int, int], float]:
    """{(peer, round): unix time logged} of every drop-out in the node's view log."""
    records = read_node_log(cluster, node).records
    return {(r.drop_out.peer, r.drop_out.round): r.logged_unix for r in records if r.WhichOneof("kind") == "drop_out"}


def last_round_sent(cluster: ComposeCluster, node: int) -> int:
    """The last round whose value of `node` exists anywhere: in its own sent records or its neighbours' logs.

    A node killed between a neighbour's acknowledgement and its own sent record leaves that
    value only in the neighbour's log.
    """
    rounds = [r.round for r in read_node_log(cluster, node).of_kind("sent")]
    for w in cluster.topology.neighbours[node]:
        rounds += [r.round for r in read_node_log(cluster, w).of_kind("received") if r.peer == node]
    return max(rounds)


def decisions(cluster: ComposeCluster, node: int) -> set[tuple[int, int]]:
    """(peer, round) of every neighbour's value the node logged as received or as dropped."""
    received = {(r.peer, r.round) for r in read_node_log(cluster, node).of_kind("received")}
    return received | set(drop_outs(cluster, node))


def rounds_decided(cluster: ComposeCluster, node: int) -> int:
    """How many rounds, from round 0 on, the node's log shows closed: each neighbour's value received or dropped."""
    decided = decisions(cluster, node)
    neighbours = cluster.topology.neighbours[node]
    return next(t for t in range(ROUNDS + 1) if t == ROUNDS or any((w, t) not in decided for w in neighbours))


def assert_audited_rounds(report: dict, cluster: ComposeCluster, stopped: int, last_round: int) -> None:
    """Every other node completed the run; the stopped one the rounds its log closed, or that its last value proves."""
    completed = report["run"]["rounds_completed"]
    expected = max(rounds_decided(cluster, stopped), last_round)
    assert completed == [expected if v == stopped else ROUNDS for v in range(cluster.topology.n)]
    assert completed[stopped] < ROUNDS


def assert_stopped_node_logged_until(cluster: ComposeCluster, node: int, last_round: int) -> None:
    """The node's log holds every round before its last: a value sent to each neighbour, each one's taken or dropped."""
    log = read_node_log(cluster, node)
    assert not log.of_kind("final_output"), f"node {node} finished the run: the fault came too late"
    sent = {(r.peer, r.round) for r in log.of_kind("sent")}
    decided = decisions(cluster, node)
    for t in range(last_round):
        for w in cluster.topology.neighbours[node]:
            assert (w, t) in sent, f"node {node}'s log lost its round-{t} value to node {w}"
            assert (w, t) in decided, f"node {node}'s log lost what it did with node {w}'s round-{t} value"


def assert_neighbours_dropped_after(cluster: ComposeCluster, gone: int, last_round: int) -> None:
    """Every neighbour of `gone` logged it as dropped in every round after its last value."""
    for w in cluster.topology.neighbours[gone]:
        missing = [t for t in range(last_round + 1, ROUNDS) if (gone, t) not in drop_outs(cluster, w)]
        assert not missing, f"node {w} did not log node {gone} as dropped in rounds {missing}"


def assert_audit_accounts_drop_outs(report: dict, cluster: ComposeCluster) -> None:
    """The audited schedule mixes exactly the values no node logged as dropped, over the rounds each completed."""
    completed = report["run"]["rounds_completed"]
    expected = sum(
        len(cluster.topology.neighbours[v]) * completed[v]
        - sum(1 for _, t in drop_outs(cluster, v) if t < completed[v])
        for v in range(cluster.topology.n)
    )
    assert report["run"]["messages_used"] == expected, (report["run"], expected)
    assert expected < report["run"]["messages_planned"]
    assert report["planned_vs_run"]["same_schedule"] is False


def assert_run_went_on_without(cluster: ComposeCluster, stopped: int, audit_dir: Path) -> dict:
    """The stopped node logged every round up to its last value, its neighbours dropped it after,
    and the audit passes and counts exactly those rounds and drop-outs; returns the report."""
    last = last_round_sent(cluster, stopped)
    assert FAULT_ROUND <= last < ROUNDS - 1, f"the fault landed at round {last}"
    assert_stopped_node_logged_until(cluster, stopped, last)
    assert_neighbours_dropped_after(cluster, stopped, last)
    report = audit_cleanly(cluster, audit_dir)
    assert_audited_rounds(report, cluster, stopped, last)
    assert_audit_accounts_drop_outs(report, cluster)
    return report


def arrival_lags(cluster: ComposeCluster, sender: int, late: int, early: int) -> list[float]:
    """Per round, how much later the sender's value reached `late` than `early` (their received records).

    The sender sends each round's value to all its neighbours at once, so on healthy links the
    two arrivals are logged within milliseconds of each other.
    """
    arrived = {}
    for receiver in (late, early):
        for record in read_node_log(cluster, receiver).records:
            if record.WhichOneof("kind") == "received" and record.received.peer == sender:
                arrived[(receiver, record.received.round)] = record.logged_unix
    return [arrived[(late, t)] - arrived[(early, t)] for t in range(1, ROUNDS)]


# --- the scenarios ---------------------------------------------------------------------------


def test_sigkill_mid_run(cluster_run: ComposeRun, tmp_path):
    run, cluster = cluster_run, cluster_run.cluster
    run.up()
    run.wait_until_round(KILLED, FAULT_ROUND + 2, START_TIMEOUT_S)
    run.kill(KILLED)
    containers = run.wait_all_exited(RUN_TIMEOUT_S)
    assert exit_codes(containers) == expected_exit_codes(run, {KILLED: EXIT_SIGKILL})

    survivors = [v for v in run.nodes if v != KILLED]
    assert_logs_undamaged(cluster, survivors)
    for name in (VIEW_LOG_NAME, PRIVATE_LOG_NAME):
        damage = read_node_log(cluster, KILLED, name).damage
        assert damage is None or damage.kind == "torn_tail", f"killed node's {name}: {damage}"
    assert_run_went_on_without(cluster, KILLED, tmp_path / "audit")


def test_network_cut_and_reconnect(cluster_run: ComposeRun, tmp_path):
    run, cluster = cluster_run, cluster_run.cluster
    run.up()
    run.wait_until_round(CUT, FAULT_ROUND, START_TIMEOUT_S)
    cut_from = time.time()
    run.disconnect(CUT)
    time.sleep(CUT_S)
    run.reconnect(CUT)
    cut_until = time.time()
    containers = run.wait_all_exited(RUN_TIMEOUT_S)
    assert exit_codes(containers) == expected_exit_codes(run)
    assert_logs_undamaged(cluster, run.nodes)

    # The cut shows on both sides: the neighbours dropped node CUT, and it dropped each of them.
    neighbours = cluster.topology.neighbours[CUT]
    for w in neighbours:
        during = [key for key, at in drop_outs(cluster, w).items() if key[0] == CUT and cut_from < at < cut_until]
        assert during, f"node {w} logged no drop-out of node {CUT} during the cut"
    dropped_by_cut = {peer for (peer, _), at in drop_outs(cluster, CUT).items() if cut_from < at < cut_until}
    assert dropped_by_cut == set(neighbours), f"during the cut node {CUT} dropped only {dropped_by_cut}"
    # Reconnected, the nodes get back in step (a node that is behind hurries through the rounds
    # its neighbours closed; one that is ahead asks again until its value is taken), so values
    # flow both ways again and the last round is a full exchange.
    for here, there in [(w, CUT) for w in neighbours] + [(CUT, w) for w in neighbours]:
        received = read_node_log(cluster, here).of_kind("received")
        assert any(r.peer == there and r.round == ROUNDS - 1 for r in received), (
            f"node {here} did not get node {there}'s value of the last round: they never got back in step")

    report = audit_cleanly(cluster, tmp_path / "audit")
    assert report["run"]["rounds_completed"] == [ROUNDS] * cluster.topology.n
    assert_audit_accounts_drop_outs(report, cluster)


def test_restarted_node_refuses_to_rejoin(cluster_run: ComposeRun, tmp_path):
    run, cluster = cluster_run, cluster_run.cluster
    run.up()
    run.wait_until_round(RESTARTED, FAULT_ROUND, START_TIMEOUT_S)
    run.restart(RESTARTED)
    containers = run.wait_all_exited(RUN_TIMEOUT_S)
    assert exit_codes(containers) == expected_exit_codes(run, {RESTARTED: EXIT_ERROR})
    exits = run.exits(RESTARTED)
    assert [code for _, code in exits] == [EXIT_STOPPED, EXIT_ERROR], run.logs(RESTARTED)
    output = run.logs(RESTARTED)
    assert "stopped before the run completed" in output and "does not rejoin" in output, output

    # Nothing was written after the first process died: its logs are exactly as it left them.
    first_died = exits[0][0]
    assert_logs_undamaged(cluster, run.nodes)
    for name in (VIEW_LOG_NAME, PRIVATE_LOG_NAME):
        log = read_node_log(cluster, RESTARTED, name)
        assert [r.WhichOneof("kind") for r in log.records].count("header") == 1, name
        assert max(r.logged_unix for r in log.records) < first_died, name
        assert (cluster.log_dir(RESTARTED) / name).stat().st_mtime < first_died, f"{name} changed after the stop"
    report = assert_run_went_on_without(cluster, RESTARTED, tmp_path / "audit")
    assert report["replay"]["nodes"][RESTARTED]["log"] == "intact"


def test_one_slow_link(cluster_run: ComposeRun, tmp_path):
    run, cluster = cluster_run, cluster_run.cluster
    u, v = SLOW_LINK
    run.up()
    run.slow_link(u, v, LINK_DELAY_MS)
    assert max(run.progress(u), run.progress(v)) < 1, "the link was slowed only after round 0"
    containers = run.wait_all_exited(RUN_TIMEOUT_S)
    assert exit_codes(containers) == expected_exit_codes(run)
    assert_logs_undamaged(cluster, run.nodes)
    assert {w: drop_outs(cluster, w) for w in run.nodes} == {w: {} for w in run.nodes}
    assert_estimates_are_noisy_mean(cluster)

    # Each end's values reached the other end the delay later than its other neighbours, which
    # themselves got them at the same time.
    for here, there in ((u, v), (v, u)):
        fast, other = (w for w in cluster.topology.neighbours[here] if w != there)
        slow_lag = statistics.median(arrival_lags(cluster, here, there, fast))
        fast_lag = statistics.median(arrival_lags(cluster, here, other, fast))
        assert slow_lag >= 0.7 * LINK_DELAY_MS / 1000, f"node {here} -> {there}: median lag {slow_lag:.3f}s"
        assert abs(fast_lag) < 0.05, f"node {here} -> {other} and {fast}: median lag {fast_lag:.3f}s"

    report = audit_cleanly(cluster, tmp_path / "audit")
    assert report["planned_vs_run"]["same_schedule"] is True
