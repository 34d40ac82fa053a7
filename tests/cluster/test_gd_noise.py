"""Noisy Muffliato-GD on 8 real processes: accuracy against σ, and the linearized column rebuilt from the logs.

The runs are test_gd_cluster.py's cluster (hypercube, simulation sampler, one data shard per node).
Utility: a separable logistic problem at σ ∈ {0, 0.5, 4}, each noisy σ over three simulation seeds
(σ = 0 draws nothing, so its one run stands for every seed). Privacy: one noisy least-squares run
(K = 2 plain rounds per step) whose every message is re-derived from the nodes' private logs by
our own propagation through the published weights, not the auditor's unrolling; the pairwise
Gaussian divergences of those rows, by a pseudo-inverse, must be the audit's `linearized` column
(the rows hold every gradient fixed; the `exact` column is the proven bound, not this model).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import node_log_dir
from node.codec import from_tensor
from node.learning import metric
from node.protocols.muffliato_gd import NOISE_PURPOSE, MuffliatoGDParams
from node.topology import Topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, LogContents, read_log
from tests.cluster.test_gd_cluster import N, gd_params, learning_cluster, models, unit_rows

pytestmark = pytest.mark.cluster
SIGMAS = (0.0, 0.5, 4.0)
SEEDS = (1, 2, 3)
ACCURACY_DIMENSION, ACCURACY_STEPS = 10, 20
NOISE_STD_RTOL = 0.05  # 3 seeds × 8 nodes × 20 steps × 10 coordinates = 4800 draws: the std's std error ≈ 1%
PAYLOAD_ATOL = 1e-9
EXACT_RTOL = 1e-6
NONNEGATIVE_ATOL = 1e-12

Coefficients = dict[tuple[int, int], np.ndarray]  # (round, sender) -> [u, s]: coefficient of g_u^s + z_u^s


def private_log(rundir: Path, node: int) -> tuple[np.ndarray, np.ndarray]:
    """(clipped gradients, gradient noise draws) of one node, one row per step, from its private log."""
    private = read_log(node_log_dir(rundir, node) / PRIVATE_LOG_NAME)
    gradients = np.array([from_tensor(record.value) for record in private.of_kind("private_input")])
    draws = [draw for draw in private.of_kind("noise") if draw.purpose == NOISE_PURPOSE]
    assert [draw.step for draw in draws] == list(range(len(gradients))), node
    return gradients, np.array([from_tensor(draw.value) for draw in draws])


def test_accuracy_degrades_with_sigma_and_the_noise_is_the_published_one(tmp_path: Path) -> None:
    """Mean test accuracy over seeds falls strictly with σ, and the draws that caused it are N(0, σ²).

    The σ are far apart: in a numpy replica of these runs, means over 3 seeds are 0.91 > 0.75 ± 0.03 >
    0.55 ± 0.05, each gap over 5 of its standard deviations (20 triples of seeds, none out of order).
    """
    rng = np.random.default_rng(0)
    separator = unit_rows(rng, 1, ACCURACY_DIMENSION)[0]
    x, test_x = unit_rows(rng, N * 30, ACCURACY_DIMENSION), unit_rows(rng, 1000, ACCURACY_DIMENSION)
    mean_accuracy, draws = [], []
    for sigma in SIGMAS:
        accuracies, pooled = [], []
        for seed in SEEDS[:1] if sigma == 0.0 else SEEDS:
            params = gd_params(sigma=sigma, dimension=ACCURACY_DIMENSION, steps=ACCURACY_STEPS)
            _, result = learning_cluster(tmp_path / f"sigma-{sigma}-seed-{seed}", params, x, np.sign(x @ separator),
                                         seed=seed)
            assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
            accuracies += [metric("logistic", model, test_x, np.sign(test_x @ separator)) for model in models(result)]
            pooled += [private_log(result.rundir, v)[1] for v in range(N)]
        mean_accuracy.append(float(np.mean(accuracies)))
        draws.append(np.concatenate(pooled))
    assert mean_accuracy[0] > mean_accuracy[1] > mean_accuracy[2], dict(zip(SIGMAS, mean_accuracy))
    assert mean_accuracy[0] >= 0.9, mean_accuracy  # the noiseless run learns: the fall is the noise's
    assert draws[0].shape == (N * ACCURACY_STEPS, ACCURACY_DIMENSION) and not draws[0].any()
    for sigma, pooled_draws in zip(SIGMAS[1:], draws[1:]):
        assert pooled_draws.shape == (len(SEEDS) * N * ACCURACY_STEPS, ACCURACY_DIMENSION)
        assert abs(pooled_draws.std() / sigma - 1) < NOISE_STD_RTOL, (sigma, pooled_draws.std())
        assert abs(pooled_draws.mean()) < 5 * sigma / np.sqrt(pooled_draws.size)


def gossip_received(log: LogContents) -> list[tuple[int, int, np.ndarray, bool]]:
    """(round, sender, payload, mixed?) of every model that reached the node: taken, or refused with its payload."""
    taken = [(r.round, r.peer, from_tensor(r.payload), True) for r in log.of_kind("received") if not r.kind]
    refused = [(r.round, r.claimed_sender, from_tensor(r.payload), False) for r in log.of_kind("rejected")
               if not r.kind and r.HasField("payload")]
    return taken + refused


def propagate(topology: Topology, logs: list[LogContents]) -> tuple[Coefficients, np.ndarray]:
    """Coefficients of every model sent, and of every node's output, replaying θ ← Wθ with the logged arrivals.

    Step t subtracts η (g_v^t + z_v^t) from θ_v, then each of its K rounds mixes v's model with the models v
    took in that round at the published weights, the weight of a neighbour it did not take kept by v itself.
    """
    params = topology.protocol
    taken: dict[tuple[int, int], set[int]] = {}
    for v, log in enumerate(logs):
        for round_index, sender, _, mixed in gossip_received(log):
            if mixed:
                taken.setdefault((round_index, v), set()).add(sender)
    current = np.zeros((N, N, params.steps))
    sent: Coefficients = {}
    for t in range(params.steps):
        current[np.arange(N), np.arange(N), t] -= params.learning_rate
        for r in range(t * params.gossip_rounds, (t + 1) * params.gossip_rounds):
            sent.update({(r, w): current[w].copy() for w in range(N)})
            following = np.empty_like(current)
            for v in range(N):
                heard, row = taken.get((r, v), set()), topology.weight_row_at(v, t)
                kept = sum(weight for peer, weight in row.items() if peer not in heard)
                following[v] = kept * current[v] + sum(row[w] * current[w] for w in heard)
            current = following
    return sent, current


def check_payloads(logs: list[LogContents], sent: Coefficients, final: np.ndarray, rundir: Path) -> int:
    """Apply the rebuilt coefficients to the logged g + z: every sent, received and output value; return #received."""
    private = [private_log(rundir, u) for u in range(N)]
    columns = np.array([gradients + draws for gradients, draws in private])  # [u, s, d]

    def value(coefficients: np.ndarray) -> np.ndarray:
        return np.einsum("us,usd->d", coefficients, columns)

    received = 0
    for v, log in enumerate(logs):
        for record in log.of_kind("sent"):
            np.testing.assert_allclose(from_tensor(record.payload), value(sent[record.round, v]), atol=PAYLOAD_ATOL)
        for round_index, sender, payload, _ in gossip_received(log):
            np.testing.assert_allclose(payload, value(sent[round_index, sender]), atol=PAYLOAD_ATOL)
            received += 1
        (output,) = log.of_kind("final_output")
        np.testing.assert_allclose(from_tensor(output.value), value(final[v]), atol=PAYLOAD_ATOL)
    return received


def divergence_blocks(view: np.ndarray, observer: int) -> np.ndarray:
    """X_u = E_uᵀ K⁺K E_u (T × T) for every source u (NaN for the observer): μ² = (Δ/σ)² δᵀ X_u δ.

    view: (m, n, T) coefficients of the observer's messages; K is it without the observer's own columns
    (it knows its gradients and noise). u's change δ (per step, in units of Δ) shifts the view by K E_u δ
    against noise σ² K Kᵀ, and Kᵀ (K Kᵀ)⁺ K = K⁺K, the projection on K's row space.
    """
    steps = view.shape[2]
    others = [u for u in range(N) if u != observer]
    reduced = view[:, others].reshape(len(view), -1)
    projection = (np.linalg.pinv(reduced) @ reduced).reshape(len(others), steps, len(others), steps)
    blocks = np.full((N, steps, steps), np.nan)
    blocks[others] = [projection[i, :, i, :] for i in range(len(others))]
    return blocks


def check_linearized_column(report: dict, pairs: dict[str, np.ndarray], logs: list[LogContents], sent: Coefficients,
                       params: MuffliatoGDParams) -> int:
    """Every pair's μ² from the rebuilt rows against the `linearized` columns of the report's `pairs`
    (`read_pairs`); return how many pairs are aligned.

    The audit's lower end is the worst change of ±Δ at every step (exact for scalar gradients): all
    2^(T−1) sign patterns here. Where X_u ≥ 0 entrywise the aligned change (the same Δ every step) is
    that worst one and the upper end is it too; elsewhere the upper end may only be larger.
    """
    alpha, delta, scale = report["alpha"], report["delta"], (params.sensitivity / params.sigma) ** 2
    keys = ("rdp", "eps", "rdp_upper", "eps_upper")
    audited = {key: pair_matrix(pairs, f"linearized_{key}", N) for key in keys}
    signs = np.array([(1.0, *rest) for rest in itertools.product((1.0, -1.0), repeat=params.steps - 1)])
    aligned_pairs = 0
    for v, log in enumerate(logs):
        blocks = divergence_blocks(np.array([sent[r, w] for r, w, _, _ in gossip_received(log)]), v)
        for u in (u for u in range(N) if u != v):
            linearized, block = {key: audited[key][u, v] for key in keys}, blocks[u]
            worst = scale * np.max(np.einsum("cs,st,ct->c", signs, block, signs))
            assert 0.0 < worst <= scale * params.steps * (1 + 1e-9), (u, v, worst)
            np.testing.assert_allclose(2 * linearized["rdp"] / alpha, worst, rtol=EXACT_RTOL, err_msg=f"{u} -> {v}")
            np.testing.assert_allclose(linearized["eps"], gaussian_epsilon(np.sqrt(worst), delta), rtol=EXACT_RTOL)
            if np.all(block >= -NONNEGATIVE_ATOL):
                aligned = scale * block.sum()
                np.testing.assert_allclose([2 * linearized["rdp_upper"] / alpha, worst], aligned, rtol=EXACT_RTOL)
                np.testing.assert_allclose(linearized["eps_upper"], gaussian_epsilon(np.sqrt(aligned), delta),
                                           rtol=EXACT_RTOL)
                aligned_pairs += 1
            else:
                assert 2 * linearized["rdp_upper"] / alpha >= worst * (1 - EXACT_RTOL), (u, v)
    return aligned_pairs


def test_least_squares_linearized_column_matches_a_rebuild_from_the_logs(tmp_path: Path) -> None:
    """Rows rebuilt from the logs reproduce every payload to 1e-9, and their divergences are the audit's
    `linearized` (what `exact` meant before it became the proven bound)."""
    rng = np.random.default_rng(3)
    dimension = 3
    x = unit_rows(rng, N * 20, dimension)
    y = x @ rng.normal(size=dimension) + 0.05 * rng.normal(size=len(x))
    params = gd_params(task="least_squares", sigma=1.0, dimension=dimension, steps=6, gossip_rounds=2,
                       learning_rate=0.5)
    topology, result = learning_cluster(tmp_path / "squares", params, x, y, seed=4)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    logs = [read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME) for v in range(N)]
    sent, final = propagate(topology, logs)
    assert check_payloads(logs, sent, final, result.rundir) == N * 3 * params.rounds  # 3 neighbours, every round
    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    aligned = check_linearized_column(report, read_pairs(tmp_path / "audit"), logs, sent, params)
    assert aligned == N  # K = 2 on the 3-cube: X ≥ 0 for the antipode only
