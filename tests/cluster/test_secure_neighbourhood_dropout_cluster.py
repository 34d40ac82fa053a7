"""A secure-neighbourhood node killed mid-run on real processes: the masks left in, measured and recomputed by hand.

A 4-node ring, 4 rounds, node 1 SIGKILLed as round 2 starts. On the ring each receiver's two
neighbours share one mask per round; node 1's co-neighbour is node 3, so from round 2 on node 3's
masks with node 1 in the values it sends nodes 0 and 2 have no opposite term. The test rebuilds
the run from the logs on its own (DECOR's drop-out test reads the schedule the same way), replays
the nodes' arithmetic in numpy, once on the logged draws and once on coefficient rows, and checks
the report against it: the survivors' outputs, their MSE against the mean of all four clipped
inputs, the masks' share of it, the rounds whose masks no longer cancel, and the exact column of
the run that happened (a Gaussian view over the draws the observer does not hold), which differs
from the run without the drop-out.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.logview import number_ranges
from node.codec import from_tensor
from node.pairwise_secrets import edge_sign
from node.protocols.secure_neighbourhood import MASK_PURPOSE, NOISE_PURPOSE, SecureNeighbourhoodParams, mask_step
from node.topology import Topology
from node.viewlog import PRIVATE_LOG_NAME, read_log
from tests.cluster.conftest import MakeClusterFiles
from tests.cluster.test_decor_dropout_cluster import AT, KILLED, ROUNDS, N, Schedule, gaussian_loss, logged_schedule

pytestmark = pytest.mark.cluster

RATIO, SIGMA = 3.0, 0.5

Noise = Callable[[int, int], np.ndarray]  # (node, round) -> its own draw
Mask = Callable[[int, int, int, int], np.ndarray]  # (adder j, receiver v, other end k, round) -> the mask j adds


def replay(topology: Topology, schedule: Schedule, start: np.ndarray, noise: Noise,
           mask: Mask) -> tuple[dict[tuple[int, int, int], np.ndarray], np.ndarray]:
    """The nodes' arithmetic: y_j = x_j + η_j, z_{j→v} = W_vj y_j + Σ_k s_jk m^{(v)}_{jk}, x_v' = W'_vv y_v + Σ_used z;
    a stopped node keeps x. Returns every value sent (sender, round, receiver) and the final states."""
    state, sent = start.copy(), {}
    for t in range(ROUNDS):
        running = [v for v in range(N) if t < schedule.completed[v]]
        noisy = {v: state[v] + noise(v, t) for v in running}
        for j in running:
            for v in topology.neighbours[j]:
                sent[j, t, v] = topology.weight_row(v)[j] * noisy[j] + sum(
                    (edge_sign(j, k) * mask(j, v, k, t) for k in topology.neighbours[v] if k != j),
                    np.zeros_like(noisy[j]))
        following = state.copy()
        for v in running:
            row, used = topology.weight_row(v), schedule.used[v][t]
            following[v] = (1.0 - sum(row[w] for w in used)) * noisy[v] + sum(sent[w, t, v] for w in used)
        state = following
    return sent, state


def logged(rundir: Path, dimension: int) -> tuple[np.ndarray, list[dict[tuple[str, int], np.ndarray]]]:
    """Every node's clipped input and its draws by (purpose, step), from the private logs."""
    inputs, draws = [], []
    for v in range(N):
        log = read_log(node_log_dir(rundir, v) / PRIVATE_LOG_NAME)
        inputs.append(from_tensor(log.of_kind("private_input")[0].value)[:dimension])
        draws.append({(d.purpose, int(d.step)): from_tensor(d.value)[:dimension] for d in log.of_kind("noise")
                      if d.purpose in (NOISE_PURPOSE, MASK_PURPOSE)})
    return np.array(inputs), draws


def test_a_killed_secure_neighbourhood_node_leaves_masks_that_no_longer_cancel_measured_as_by_hand(
        make_cluster_files: MakeClusterFiles, tmp_path: Path) -> None:
    params = SecureNeighbourhoodParams(sigma=SIGMA, mask_ratio=RATIO, rounds=ROUNDS, dimension=2, alpha=2.0)
    files = make_cluster_files("ring", N, protocol=params, round_deadline_s=1.0, name="secure-neighbourhood-killed")
    topology = files.topology
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="secure", kill_at_round={KILLED: AT}))
    assert result.ok and result.nodes[KILLED].killed_by_request
    report: dict[str, Any] = audit_run(result.rundir, tmp_path / "audit",
                                       AuditOptions(attack_pairs="none", with_private_logs=True, data=files.data_dir))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    audited = pair_matrix(read_pairs(tmp_path / "audit"), "exact_rdp_upper", N)
    check_against_the_logs(result.rundir, topology, report, audited, result.estimates())


def check_against_the_logs(rundir: Path, topology: Topology, report: dict[str, Any], audited: np.ndarray,
                           estimates: dict[int, np.ndarray]) -> None:
    """Every number the test checks, recomputed from the logs of the run in `rundir`."""
    schedule = logged_schedule(rundir, topology)
    assert schedule.completed[KILLED] == AT and [c for v, c in enumerate(schedule.completed) if v != KILLED] == [4] * 3
    survivors = [v for v in range(N) if schedule.completed[v] == ROUNDS]
    start, draws = logged(rundir, 2)
    zero = np.zeros(2)

    def own(v: int, t: int) -> np.ndarray:
        return draws[v].get((NOISE_PURPOSE, t), zero)

    def logged_mask(j: int, v: int, k: int, t: int) -> np.ndarray:
        return draws[j][MASK_PURPOSE, mask_step(t, v, k, N)]

    # The survivors' outputs, replayed from the logged draws, are the logged estimates.
    _, final = replay(topology, schedule, start, own, logged_mask)
    np.testing.assert_allclose(np.array([estimates[v][:2] for v in survivors]), final[survivors], atol=1e-12)

    # The MSE against the mean of all four clipped inputs, and the masks' share of it: the survivors' mean moved by
    # the masks (a run without any mask leaves the rest of the arithmetic alone).
    mse = float(np.mean((final[survivors] - start.mean(axis=0)) ** 2))
    _, without = replay(topology, schedule, start, own, lambda j, v, k, t: zero)
    shift = (final[survivors] - without[survivors]).mean(axis=0)
    dropped = report["utility"]["drop_outs"]
    assert report["utility"]["mse"] == pytest.approx(mse, rel=1e-9)
    assert dropped["uncancelled_mse"] == pytest.approx(float(np.mean(shift**2)), rel=1e-9)
    assert dropped["share"] == pytest.approx(float(np.mean(shift**2)) / mse, rel=1e-9) and dropped["share"] > 0.01
    assert dropped["stopped"] == [{"node": KILLED, "rounds_completed": AT}] and dropped["survivors"] == 3

    # The same replay on coefficient rows over [inputs | draws]: each node's draw per round, and each mask per
    # (receiver, pair, round) at RATIO (both ends add the same draw with opposite signs).
    columns = [("noise", v, -1, -1, t) for t in range(ROUNDS) for v in range(N)]
    columns += [("mask", v, j, k, t) for t in range(ROUNDS) for v in range(N) for j in topology.neighbours[v]
                for k in topology.neighbours[v] if j < k]
    index = {column: N + i for i, column in enumerate(columns)}

    def unit(column: tuple[str, int, int, int, int], scale: float = 1.0) -> np.ndarray:
        row = np.zeros(N + len(columns))
        row[index[column]] = scale
        return row

    def symbolic(plan: Schedule) -> tuple[dict[tuple[int, int, int], np.ndarray], np.ndarray]:
        return replay(topology, plan, np.hstack([np.eye(N), np.zeros((N, len(columns)))]),
                      lambda v, t: unit(("noise", v, -1, -1, t)),
                      lambda j, v, k, t: unit(("mask", v, min(j, k), max(j, k), t), RATIO))

    sent, rows = symbolic(schedule)
    total = rows[survivors].sum(axis=0)[N:]
    uncancelled = sorted({c[4] for c, x in zip(columns, total) if c[0] == "mask" and abs(x) > 1e-9})
    assert dropped["uncancelled_rounds"] == number_ranges(uncancelled) and uncancelled[-2:] == [2, 3]
    left_in = [c for c in columns if c[0] == "mask" and KILLED in c[2:4] and c[4] >= AT]
    assert all(abs(total[columns.index(c)]) == pytest.approx(RATIO) for c in left_in)  # node 3's masks, whole
    (finding,) = [f for f in report["replay"]["consistency"] if f["kind"] == "uncancelled_pairwise_terms"]
    assert finding["node"] == KILLED and "co-neighbours 3 added masks shared with it in rounds 2-3" in finding["detail"]
    assert f"rounds {number_ranges(uncancelled)} no longer cancel" in finding["detail"]

    # The exact column of the run that happened, as a Gaussian view: a curious v holds its input, its own draws and
    # the masks it shares; u's loss is a_uᵀ Cov⁺ a_u over the rest, RDP = α Δ²/(2σ²) times it.
    scale = 2.0 * 1.0 / (2 * SIGMA**2)
    planned = Schedule([ROUNDS] * N, [[set(topology.neighbours[v])] * ROUNDS for v in range(N)],
                       [{(w, t) for w in topology.neighbours[v] for t in range(ROUNDS)} for v in range(N)])
    planned_sent, _ = symbolic(planned)
    differs = 0.0
    for v in range(N):
        hidden = np.array([not (c[1] == v if c[0] == "noise" else v in c[2:4]) for c in columns])
        view = np.array([sent[w, t, v] for w, t in sorted(schedule.received[v])])
        full = np.array([planned_sent[w, t, v] for w, t in sorted(planned.received[v])])
        for u in range(N):
            if u != v:
                by_hand = scale * gaussian_loss(view, u, hidden)
                assert audited[u, v] == pytest.approx(by_hand, rel=1e-6, abs=1e-12)
                differs = max(differs, abs(by_hand - scale * gaussian_loss(full, u, hidden)))
    assert differs > 1e-3  # the drop-out changed what the survivors' views reveal
    means = report["secure_neighbourhood"]["planned_vs_run"]["mean_exact_rdp_per_observer"]
    np.testing.assert_allclose(means["run"], np.nansum(audited, axis=0) / N, rtol=1e-9)
    assert max(abs(a - b) for a, b in zip(means["run"], means["planned"])) > 1e-4
