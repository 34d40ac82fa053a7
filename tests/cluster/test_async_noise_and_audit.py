"""One noisy randomized Muffliato run on 8 real processes: its utility, and its audit rebuilt by hand.

Both tests share one run (σ = 1, Δ = 2, dimension 2, 60 ticks per node at 50 per second, simulation
sampler with a fixed seed so the noise, hence the error floor, is reproducible).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from graphlib import TopologicalSorter

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import (
    ClusterResult,
    LaunchOptions,
    node_log_dir,
    run_cluster,
)
from coordinator_tools.theory import (
    randomized_muffliato_mse_bound,
    randomized_muffliato_t_stop,
)
from node.data import clip_to_ball
from node.mailboxes.exchange_desk import ACCEPT, COMMIT, COMMITTED
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.viewlog import VIEW_LOG_NAME, LogContents, read_log

pytestmark = pytest.mark.cluster
N = 8
SIGMA, SENSITIVITY, ALPHA, DIMENSION, EXCHANGES = 1.0, 2.0, 2.0, 2, 60
VALUE_KINDS = (ACCEPT, COMMIT, COMMITTED)  # each carries its sender's value just before the exchange
EXACT_RTOL = 1e-6


@dataclass(frozen=True)
class NoisyRun:
    result: ClusterResult
    clipped: np.ndarray  # the inputs as the nodes clipped them, one row per node
    spectral_gap: float
    exact_rdp: np.ndarray  # the audit's exact column [u, v], read from its pairs file


@pytest.fixture(scope="module")
def noisy_run(make_module_cluster_files, tmp_path_factory: pytest.TempPathFactory) -> NoisyRun:
    """Run the cluster once and audit it with private logs, for both tests."""
    params = MuffliatoAsyncParams(sigma=SIGMA, sensitivity=SENSITIVITY, alpha=ALPHA, dimension=DIMENSION,
                                  exchanges=EXCHANGES, tick_rate=50.0, exchange_timeout_s=1.0)
    files = make_module_cluster_files(name="async-noisy-audit", protocol=params)
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=11))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    audit_dir = tmp_path_factory.mktemp("audit")
    audit_run(result.rundir, audit_dir, AuditOptions(with_private_logs=True, attack_pairs="none"))
    exact = pair_matrix(read_pairs(audit_dir), "exact_rdp", N)
    clipped = np.array([clip_to_ball(value, SENSITIVITY / 2.0)[0] for value in files.values])
    return NoisyRun(result, clipped, files.topology.spectral_gap, exact)


def view_logs(run: NoisyRun) -> list[LogContents]:
    return [read_log(node_log_dir(run.result.rundir, v) / VIEW_LOG_NAME) for v in range(N)]


def test_noisy_estimates_are_within_theorem_3s_bound(noisy_run: NoisyRun) -> None:
    """Muffliato Thm 3: for t ≥ T_stop, (1/2n) Σ_v E‖x_v^t − x̄‖² ≤ 2σ²/n, i.e. (1/n) Σ_v ≤ 4σ²/n per coordinate,

    with T_stop = ln((n/σ²) max(σ², (1/n) Σ_v ‖x_v⁰ − x̄‖²)) / λ(p) edge activations and, for weight-proportional
    activation, λ(p) = 2 λ_W / n. Bound here: D · 4σ²/n = 2 · 4 · 1 / 8 = 1. Only committed exchanges average, so
    it is they that must outnumber T_stop (ln 8 · 8 / (2 · ½) ≈ 17 on the hypercube, λ_W = ½; ~300 commit).
    x̄ is the mean of the clipped inputs, what the nodes average; the bound is on an expectation, the fixed seed
    makes it one draw.
    """
    spread = float(np.mean(np.sum((noisy_run.clipped - noisy_run.clipped.mean(axis=0)) ** 2, axis=1)))
    committed = sum(e.role == "initiator" and e.phase == "committed"
                    for log in view_logs(noisy_run) for e in log.of_kind("exchange"))
    assert committed > randomized_muffliato_t_stop(N, noisy_run.spectral_gap, SIGMA, spread)
    estimates = np.array([noisy_run.result.estimates()[v] for v in range(N)])
    mse = float(np.mean(np.sum((estimates - noisy_run.clipped.mean(axis=0)) ** 2, axis=1)))
    assert 0.0 < mse <= DIMENSION * randomized_muffliato_mse_bound(N, SIGMA)


def exchange_rows(logs: list[LogContents]) -> dict[tuple[int, int], np.ndarray]:
    """Row on z = x + η of every node's value at each of its local sequence numbers with an applied exchange.

    Walks the applied exchanges in an order consistent with both participants' sequence numbers, so each
    side's pre-exchange row is final when its exchange is reached. Key: (node, sequence), row: value after.
    """
    sides: dict[str, dict[int, tuple[int, bool]]] = {}  # exchange id -> node -> (sequence, applied)
    for v, log in enumerate(logs):
        for event in log.of_kind("exchange"):
            if event.phase in ("accepted", "proposed", "committed"):
                sequence, applied = sides.setdefault(event.exchange_id, {}).get(v, (event.sequence, False))
                sides[event.exchange_id][v] = (sequence, applied or event.phase == "committed")
    used = {xid: by_node for xid, by_node in sides.items() if any(applied for _, applied in by_node.values())}
    chains: dict[int, list[tuple[int, str]]] = {}
    for xid, by_node in used.items():
        for v, (sequence, _) in by_node.items():
            chains.setdefault(v, []).append((sequence, xid))
    order: TopologicalSorter[str] = TopologicalSorter({xid: () for xid in used})
    for chain in chains.values():
        chain.sort()
        for (_, earlier), (_, later) in itertools.pairwise(chain):
            order.add(later, earlier)
    current = np.eye(N)
    after: dict[tuple[int, int], np.ndarray] = {}
    for xid in order.static_order():
        by_node = used[xid]
        assert len(by_node) == 2, f"exchange {xid} applied with one side's log missing: {by_node}"
        (a, (seq_a, applied_a)), (b, (seq_b, applied_b)) = by_node.items()
        mean = (current[a] + current[b]) / 2
        for v, sequence, applied in ((a, seq_a, applied_a), (b, seq_b, applied_b)):
            if applied:
                current[v] = mean
                after[(v, sequence)] = mean
    return after


def row_before(after: dict[tuple[int, int], np.ndarray], node: int, sequence: int) -> np.ndarray:
    """The node's row just before its exchange at `sequence`: after its last applied exchange before it."""
    earlier = [s for (v, s) in after if v == node and s < sequence]
    return after[(node, max(earlier))] if earlier else np.eye(N)[node]


def received_rows(logs: list[LogContents], after: dict[tuple[int, int], np.ndarray]) -> list[np.ndarray]:
    """Per observer, the rows of every value that reached it: received, or refused with its payload kept."""
    views = []
    for log in logs:
        records = [(r.peer, r) for r in log.of_kind("received")]
        records += [(r.claimed_sender, r) for r in log.of_kind("rejected") if r.HasField("payload")]
        rows = {(sender, r.exchange_id): row_before(after, sender, r.sequence)
                for sender, r in records if r.kind in VALUE_KINDS and r.payload.data}
        views.append(np.array(list(rows.values())).reshape(-1, N))
    return views


def exact_rdp(views: list[np.ndarray]) -> np.ndarray:
    """ε_α(u→v) = α μ²/2 with μ² = (Δ/σ)² ‖Π_v e_u‖², Π_v the projection on v's rows without v's own column."""
    rdp = np.full((N, N), np.nan)
    for v, rows in enumerate(views):
        others = [u for u in range(N) if u != v]
        reduced = rows[:, others]
        if reduced.size:
            _, singular, basis = np.linalg.svd(reduced, full_matrices=False)
            basis = basis[singular > singular[0] * 1e-10]
        else:
            basis = np.zeros((0, N - 1))
        captured = np.sum(basis ** 2, axis=0)  # ‖Π e_u‖² for each other node u
        rdp[others, v] = ALPHA * (SENSITIVITY / SIGMA) ** 2 * captured / 2
    return rdp


def test_audit_exact_rdp_matches_an_independent_rebuild_from_the_logs(noisy_run: NoisyRun) -> None:
    """The audit's exact Rényi losses, recomputed from the view logs alone (the accept carries the responder's
    pre-exchange value, the commit the initiator's), agree with report.json."""
    logs = view_logs(noisy_run)
    recomputed = exact_rdp(received_rows(logs, exchange_rows(logs)))
    off_diagonal = ~np.eye(N, dtype=bool)
    np.testing.assert_allclose(noisy_run.exact_rdp[off_diagonal], recomputed[off_diagonal], rtol=EXACT_RTOL)
