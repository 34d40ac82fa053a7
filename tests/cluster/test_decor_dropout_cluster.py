"""A DECOR node killed mid-run on real processes: the pairwise terms left uncancelled, measured and recomputed by hand.

A 4-node ring, 4 rounds, node 1 SIGKILLed as round 2 starts. The test rebuilds the run from the
logs on its own (who dropped whom in which round, each node's clipped input and logged draws),
replays the nodes' arithmetic in numpy, and checks the report against it: the survivors'
outputs, their MSE against the mean of all four clipped inputs, the uncancelled pairwise noise's
share of it (the survivors' mean moved by the pairwise terms), the rounds whose terms no longer
cancel, and the exact column of the run that happened (a Gaussian view: a_uᵀ Cov⁺ a_u over the
draws the observer does not hold), which differs from the run without the drop-out.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.logview import number_ranges
from node.codec import from_tensor
from node.message import GOSSIP, kind_of
from node.pairwise_secrets import edge_sign
from node.protocols.decor import NOISE_PURPOSE, PAIRWISE_PURPOSE, DecorParams, pairwise_step
from node.topology import Topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.cluster.conftest import MakeClusterFiles

pytestmark = pytest.mark.cluster

N, ROUNDS, KILLED, AT = 4, 4, 1, 2
RATIO, SIGMA = 2.0, 0.5


@dataclass(frozen=True)
class Schedule:
    """What the logs say happened: rounds each node completed, the neighbours it mixed per round, what it received."""

    completed: list[int]
    used: list[list[set[int]]]
    received: list[set[tuple[int, int]]]


def logged_schedule(rundir: Path, topology: Topology) -> Schedule:
    """Rebuilt from the view logs alone: a round counts as completed when every neighbour's value arrived or was
    dropped; a dropped neighbour gives its weight to the node itself."""
    completed, used, received = [], [], []
    for v in range(N):
        log = read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME)
        heard = {(r.peer, r.round) for r in log.of_kind("received") if kind_of(r) == GOSSIP}
        dropped = {(d.peer, d.round) for d in log.of_kind("drop_out")}
        done = 0
        while done < ROUNDS and all((w, done) in heard | dropped for w in topology.neighbours[v]):
            done += 1
        completed.append(done)
        used.append([{w for w in topology.neighbours[v] if (w, t) not in dropped} for t in range(done)])
        late = {(r.claimed_sender, r.round) for r in log.of_kind("rejected")
                if r.HasField("payload") and kind_of(r) == GOSSIP}
        received.append(heard | late)
    return Schedule(completed, used, received)


def private(rundir: Path, v: int) -> tuple[np.ndarray, dict[tuple[str, int], np.ndarray]]:
    """Node v's clipped input and its draws by (purpose, step)."""
    log = read_log(node_log_dir(rundir, v) / PRIVATE_LOG_NAME)
    draws = {(d.purpose, int(d.step)): from_tensor(d.value) for d in log.of_kind("noise")
             if d.purpose in (NOISE_PURPOSE, PAIRWISE_PURPOSE)}
    return from_tensor(log.of_kind("private_input")[0].value), draws


def replay(topology: Topology, schedule: Schedule, start: np.ndarray,
           noise: dict[int, list[np.ndarray]]) -> tuple[dict[tuple[int, int], np.ndarray], np.ndarray]:
    """The nodes' arithmetic: y_v^t = x_v^t + noise[v][t] while v runs, x^{t+1} = realized mixing; a stopped node
    keeps x. Returns every value sent (sender, round) and the final states (rows: nodes)."""
    state, sent = start.copy(), {}
    for t in range(ROUNDS):
        values = {v: state[v] + noise[v][t] for v in range(N) if t < schedule.completed[v]}
        sent.update({(v, t): value for v, value in values.items()})
        following = state.copy()
        for v in values:
            row = topology.weight_row(v)
            following[v] = sum(row[w] * values[w] for w in schedule.used[v][t]) + (
                1.0 - sum(row[w] for w in schedule.used[v][t])) * values[v]
        state = following
    return sent, state


def per_node_noise(topology: Topology, draws: list[dict[tuple[str, int], np.ndarray]], *, pairwise: bool,
                   dimension: int) -> dict[int, list[np.ndarray]]:
    """What each node added in each round it ran: its independent draw, and (with `pairwise`) its signed edge terms."""
    noise: dict[int, list[np.ndarray]] = {}
    for v in range(N):
        rounds = []
        for t in range(ROUNDS):
            added = draws[v].get((NOISE_PURPOSE, t), np.zeros(dimension)).copy()
            if pairwise:
                for w in topology.neighbours[v]:
                    added += edge_sign(v, w) * draws[v].get((PAIRWISE_PURPOSE, pairwise_step(t, w, N)),
                                                            np.zeros(dimension))
            rounds.append(added)
        noise[v] = rounds
    return noise


def symbolic(topology: Topology, schedule: Schedule) -> tuple[dict[tuple[int, int], np.ndarray], np.ndarray,
                                                              list[tuple[str, int, int, int]]]:
    """The same recursion on coefficient rows over [inputs | draws]: each value's row, the final rows, and the draw
    columns named (purpose, holder, other end or -1, round), each edge draw scaled by σ_cor/σ."""
    columns: list[tuple[str, int, int, int]] = []
    for t in range(ROUNDS):
        columns += [(NOISE_PURPOSE, v, -1, t) for v in range(N)]
        columns += [(PAIRWISE_PURPOSE, i, j, t) for i in range(N) for j in topology.neighbours[i] if i < j]
    index = {column: N + k for k, column in enumerate(columns)}
    start = np.hstack([np.eye(N), np.zeros((N, len(columns)))])
    noise: dict[int, list[np.ndarray]] = {}
    for v in range(N):
        noise[v] = []
        for t in range(ROUNDS):
            row = np.zeros(N + len(columns))
            row[index[(NOISE_PURPOSE, v, -1, t)]] = 1.0
            for w in topology.neighbours[v]:
                row[index[(PAIRWISE_PURPOSE, min(v, w), max(v, w), t)]] = edge_sign(v, w) * RATIO
            noise[v].append(row)
    sent, final = replay(topology, schedule, start, noise)
    return sent, final, columns


def gaussian_loss(rows: np.ndarray, source: int, hidden: np.ndarray) -> float:
    """a_uᵀ Cov⁺ a_u for the view `rows` (inputs then unit-variance draw columns), draws outside `hidden` known."""
    a = rows[:, source]
    noise = rows[:, N:][:, hidden]
    covariance = noise @ noise.T
    solution = np.linalg.lstsq(covariance, a, rcond=None)[0]
    assert np.allclose(covariance @ solution, a, atol=1e-9), "a view that pins the input down"
    return float(a @ solution)


def test_a_killed_decor_node_leaves_terms_that_no_longer_cancel_measured_as_by_hand(
        make_cluster_files: MakeClusterFiles, tmp_path: Path) -> None:
    params = DecorParams(sigma=SIGMA, sigma_cor_ratio=RATIO, rounds=ROUNDS, dimension=2, alpha=2.0)
    files = make_cluster_files("ring", N, protocol=params, round_deadline_s=1.0, name="decor-killed")
    topology = files.topology
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="secure", kill_at_round={KILLED: AT}))
    assert result.ok and result.nodes[KILLED].killed_by_request
    report: dict[str, Any] = audit_run(result.rundir, tmp_path / "audit",
                       AuditOptions(attack_pairs="none", with_private_logs=True, data=files.data_dir))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    estimates = result.estimates()
    check_against_the_logs(result.rundir, topology, report, pair_matrix(read_pairs(tmp_path / "audit"),
                                                                         "exact_rdp_upper", N), estimates)


def check_against_the_logs(rundir: Path, topology: Topology, report: dict[str, Any], audited: np.ndarray,
                           estimates: dict[int, np.ndarray]) -> None:
    """Every number the test checks, recomputed from the logs of the run in `rundir`."""
    params = topology.protocol
    assert isinstance(params, DecorParams)
    schedule = logged_schedule(rundir, topology)
    assert schedule.completed[KILLED] == AT and [c for v, c in enumerate(schedule.completed) if v != KILLED] == [4] * 3
    survivors = [v for v in range(N) if schedule.completed[v] == ROUNDS]
    inputs, draws = zip(*(private(rundir, v) for v in range(N)))
    dimension = params.dimension
    start = np.array([x[:dimension] for x in inputs])
    trimmed = [{key: value[:dimension] for key, value in d.items()} for d in draws]

    # The survivors' outputs, replayed from the logged draws, are the logged estimates.
    _, final = replay(topology, schedule, start, per_node_noise(topology, trimmed, pairwise=True, dimension=dimension))
    np.testing.assert_allclose(np.array([estimates[v][:dimension] for v in survivors]), final[survivors], atol=1e-12)

    # The MSE against the mean of all four clipped inputs, and the uncancelled terms' share of it: the survivors'
    # mean moved by the pairwise terms (a run without any pairwise term leaves the rest of the arithmetic alone).
    truth = start.mean(axis=0)
    mse = float(np.mean((final[survivors] - truth) ** 2))
    _, without = replay(topology, schedule, start,
                        per_node_noise(topology, trimmed, pairwise=False, dimension=dimension))
    shift = (final[survivors] - without[survivors]).mean(axis=0)
    dropped = report["utility"]["drop_outs"]
    assert report["utility"]["mse"] == pytest.approx(mse, rel=1e-9)
    assert dropped["uncancelled_mse"] == pytest.approx(float(np.mean(shift**2)), rel=1e-9)
    assert dropped["share"] == pytest.approx(float(np.mean(shift**2)) / mse, rel=1e-9) and dropped["share"] > 0.01
    assert dropped["stopped"] == [{"node": KILLED, "rounds_completed": AT}] and dropped["survivors"] == 3

    # Which rounds' terms no longer cancel: a pairwise column with a non-zero coefficient in the survivors' sum.
    sent, rows, columns = symbolic(topology, schedule)
    total = rows[survivors].sum(axis=0)[N:]
    uncancelled = sorted({t for (purpose, _, _, t), c in zip(columns, total) if purpose == PAIRWISE_PURPOSE
                          and abs(c) > 1e-9})
    assert dropped["uncancelled_rounds"] == number_ranges(uncancelled) and uncancelled[-2:] == [2, 3]
    unpartnered = [(i, j, t) for purpose, i, j, t in columns if purpose == PAIRWISE_PURPOSE and KILLED in (i, j)
                   and t >= AT]
    assert all(abs(total[columns.index((PAIRWISE_PURPOSE, i, j, t))]) == pytest.approx(RATIO) for i, j, t in
               unpartnered)  # node 0's and node 2's terms on their edges to node 1, whole
    (finding,) = [f for f in report["replay"]["consistency"] if f["kind"] == "uncancelled_pairwise_terms"]
    assert finding["node"] == KILLED and "rounds 2-3 that it never matched" in finding["detail"]
    assert f"rounds {number_ranges(uncancelled)} no longer cancel" in finding["detail"]

    # The exact column of the run that happened, as a Gaussian view: observer v holds its input, its own draws and
    # the draws of its edges; u's loss is a_uᵀ Cov⁺ a_u over the rest, RDP = α Δ²/(2σ²) times it.
    scale = params.alpha * params.sensitivity**2 / (2 * SIGMA**2)
    planned = Schedule([ROUNDS] * N, [[set(topology.neighbours[v])] * ROUNDS for v in range(N)],
                       [{(w, t) for w in topology.neighbours[v] for t in range(ROUNDS)} for v in range(N)])
    planned_sent, _, _ = symbolic(topology, planned)
    differs = 0.0
    for v in range(N):
        hidden = np.array([not (holder == v or other == v) for _, holder, other, _ in columns])
        view = np.array([sent[m] for m in sorted(schedule.received[v])])
        full = np.array([planned_sent[m] for m in sorted(planned.received[v])])
        for u in range(N):
            if u != v:
                by_hand = scale * gaussian_loss(view, u, hidden)
                assert audited[u, v] == pytest.approx(by_hand, rel=1e-6, abs=1e-12)
                differs = max(differs, abs(by_hand - scale * gaussian_loss(full, u, hidden)))
    assert differs > 1e-3  # the drop-out changed what the survivors' views reveal
    means = report["decor"]["planned_vs_run"]["mean_exact_rdp_per_observer"]
    np.testing.assert_allclose(means["run"], np.nansum(audited, axis=0) / N, rtol=1e-9)
    assert max(abs(a - b) for a, b in zip(means["run"], means["planned"])) > 1e-4
