"""DECOR averaging end to end in one process (`--virtual`): cancellation, the exact column by hand, the audit.

The networked run (real processes, mutual TLS) is tests/cluster/test_decor_cluster.py.
"""

from __future__ import annotations

import struct
from pathlib import Path

import networkx as nx  # type: ignore[import-untyped]
import numpy as np
import pytest

from coordinator_tools import api
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.decor import AUDITOR
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from node.codec import from_tensor
from node.pairwise_secrets import SECRET_PURPOSE, edge_sign
from node.protocols.decor import NOISE_PURPOSE, PAIRWISE_PURPOSE, DecorParams, pairwise_step
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

ROUNDS = 3
DIMENSION = 3


def draws(node_dir: Path, purpose: str) -> dict[int, np.ndarray]:
    """step -> value of a node's private draws of `purpose`."""
    return {int(d.step): from_tensor(d.value) for d in read_log(node_dir / PRIVATE_LOG_NAME).of_kind("noise")
            if d.purpose == purpose}


def threat_model_name(audit: api.Audit) -> object:
    """The report's threat-model name."""
    described = audit.report["threat_model"]
    assert isinstance(described, dict)
    return described["name"]


@pytest.fixture(scope="module")
def ring_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[api.Run, np.ndarray]:
    folder = tmp_path_factory.mktemp("decor")
    topology = api.topology("ring", 4, protocol="decor", sigma=0.5, sigma_cor_ratio=2.0, rounds=ROUNDS,
                            dimension=DIMENSION, alpha=8.0, run_id="decor-ring")
    values = np.random.default_rng(0).uniform(-0.25, 0.25, size=(4, DIMENSION))
    data = api.write_data(values, folder / "data")
    return api.run(topology, data, folder / "run", canaries=16).check(), values


def test_pairwise_terms_cancel_in_the_network_sum(ring_run: tuple[api.Run, np.ndarray]) -> None:
    run, _ = ring_run
    n = run.topology.n
    for t in range(ROUNDS):
        total = np.zeros(DIMENSION + 16)
        largest = 0.0
        for v in range(n):
            logged = draws(run.rundir / f"node-{v}", PAIRWISE_PURPOSE)
            for w in run.topology.neighbours[v]:
                term = edge_sign(v, w) * logged[pairwise_step(t, w, n)]
                total += term
                largest = max(largest, float(np.max(np.abs(term))))
        assert largest > 0.1  # the terms are there, at σ_cor = 1
        assert np.max(np.abs(total)) <= 1e-12 * largest


def test_the_network_sum_moves_by_the_independent_noise_alone(ring_run: tuple[api.Run, np.ndarray]) -> None:
    run, _ = ring_run
    n = run.topology.n
    inputs = np.sum([from_tensor(read_log(run.rundir / f"node-{v}" / PRIVATE_LOG_NAME).of_kind("private_input")[0]
                                 .value) for v in range(n)], axis=0)
    independent = np.sum([value for v in range(n) for value in draws(run.rundir / f"node-{v}", NOISE_PURPOSE).values()],
                         axis=0)
    outputs = run.estimates.to_numpy().sum(axis=0)
    np.testing.assert_allclose(outputs, (inputs + independent)[:DIMENSION], rtol=0, atol=1e-12)


def test_no_secret_and_no_shared_draw_in_any_view_log(ring_run: tuple[api.Run, np.ndarray]) -> None:
    run, _ = ring_run
    for v in range(run.topology.n):
        node_dir = run.rundir / f"node-{v}"
        view = (node_dir / VIEW_LOG_NAME).read_bytes()
        secrets = draws(node_dir, SECRET_PURPOSE)
        assert sorted(secrets) == sorted(run.topology.neighbours[v])
        for secret in secrets.values():
            raw = bytes(secret.astype(np.uint8))
            assert raw not in view and secret.astype("<f8").tobytes() not in view
        for shared in draws(node_dir, PAIRWISE_PURPOSE).values():
            assert all(struct.pack("<d", value) not in view for value in shared)
        kinds = {record.kind for record in read_log(node_dir / VIEW_LOG_NAME).of_kind("received")}
        assert "key-share" in kinds  # the view records that an agreement happened


def test_the_audit_passes_honest_under_each_threat_model(ring_run: tuple[api.Run, np.ndarray],
                                                         tmp_path: Path) -> None:
    run, _ = ring_run
    observer = api.audit(run, tmp_path / "observer", with_private_logs=True, attack_pairs="none")
    assert observer.ok, observer.checks[~observer.checks.ok]
    assert threat_model_name(observer) == "curious-observer"
    canaries = observer.report["canaries"]
    assert isinstance(canaries, dict) and canaries["pairs"] == 12  # the canary audit ran on every pair
    eavesdropper = api.audit(run, tmp_path / "eavesdropper", attack_pairs="none", eavesdropper=True)
    assert eavesdropper.ok and threat_model_name(eavesdropper) == "eavesdropper"
    coalition = api.audit(run, tmp_path / "coalition", attack_pairs="none", colluders=(0, 2))
    assert coalition.ok


def test_exact_column_by_hand_on_a_three_node_path() -> None:
    # One round, σ_cor = σ: y0 = x0 + η0 + a, y1 = x1 + η1 − a + b, y2 = x2 + η2 − b, with Metropolis weights
    # on the path. Node 1 holds a and b: y0 and y2 carry η alone (p = 1); node 0 sees y1 with η1 + b unknown
    # (p = 1/2) and nothing of x2; the eavesdropper's p_u = (Cov⁻¹)_uu with Cov = [[2,−1,0],[−1,3,−1],[0,−1,2]].
    topology = api.topology(nx.path_graph(3), protocol="decor", sigma=1.0, sigma_cor_ratio=1.0, rounds=1,
                            dimension=1, alpha=2.0, sensitivity=1.0, run_id="decor-path")
    model = AUDITOR.linear_model(planned_transcript(topology, rounds=1, accelerated=False))
    observer = view_geometry(model).upper
    np.testing.assert_allclose(observer, [[np.nan, 1.0, 0.0], [0.5, np.nan, 0.5], [0.0, 1.0, np.nan]], atol=1e-12)
    eavesdropper = view_geometry(model, ThreatModel(eavesdropper=True)).upper
    np.testing.assert_allclose(eavesdropper[[1, 2], 0], [1 / 2, 5 / 8], atol=1e-12)


@pytest.mark.parametrize("ratio", [1.0, 3.0])
def test_noise_in_round_zero_only_by_hand_on_a_three_node_path(ratio: float) -> None:
    # Round 0 as above with σ_cor = r σ; round 1 sends x¹ = W y⁰ without noise (Metropolis: W = [[2,1,0],[1,1,1],
    # [0,1,2]] / 3). Node 0 knows x0, η0 and a: y1⁰ − (−a) = z1 + b and 3 y1¹ − z0 = z1 + z2 (z = x + η), noise
    # covariance [[1 + r², 1], [1, 2]], so p = eᵀ Cov⁻¹ e = (1 + r²)/(1 + 2r²) for u = 1 (e = (1, 1)) and for u = 2
    # (e = (0, 1)). Node 1 holds both secrets: p = 1. An eavesdropper's round 1 is W times its round 0: nothing new.
    topology = api.topology(nx.path_graph(3), protocol="decor", sigma=1.0, sigma_cor_ratio=ratio, rounds=2,
                            noisy_rounds=1, dimension=1, alpha=2.0, sensitivity=1.0, run_id="decor-path")
    model = AUDITOR.linear_model(planned_transcript(topology, rounds=2, accelerated=False))
    assert model.noise.shape[1] == 3 + 2  # round 0's draws only: three nodes' η and two edges'
    p = (1 + ratio**2) / (1 + 2 * ratio**2)
    np.testing.assert_allclose(view_geometry(model).upper, [[np.nan, 1.0, p], [p, np.nan, p], [p, 1.0, np.nan]],
                               atol=1e-12)
    one_round = api.topology(nx.path_graph(3), protocol="decor", sigma=1.0, sigma_cor_ratio=ratio, rounds=1,
                             dimension=1, alpha=2.0, sensitivity=1.0, run_id="decor-path")
    outsider = ThreatModel(eavesdropper=True)
    np.testing.assert_allclose(
        view_geometry(model, outsider).upper,
        view_geometry(AUDITOR.linear_model(planned_transcript(one_round, rounds=1, accelerated=False)), outsider).upper,
        atol=1e-12)


def test_a_run_with_noise_in_round_zero_only_moves_the_sum_once_and_audits(tmp_path: Path) -> None:
    topology = api.topology("ring", 4, protocol="decor", sigma=0.5, sigma_cor_ratio=10.0, rounds=6, noisy_rounds=1,
                            dimension=DIMENSION, alpha=8.0, run_id="decor-once")
    values = np.random.default_rng(1).uniform(-0.25, 0.25, size=(4, DIMENSION))
    run = api.run(topology, api.write_data(values, tmp_path / "data"), tmp_path / "run", seed=3).check()
    independent = [draws(run.rundir / f"node-{v}", NOISE_PURPOSE) for v in range(4)]
    assert all(sorted(d) == [0] for d in independent)  # one draw each, in round 0
    np.testing.assert_allclose(run.estimates.to_numpy().sum(axis=0),
                               values.sum(axis=0) + np.sum([d[0] for d in independent], axis=0), atol=1e-12)
    audit = api.audit(run, tmp_path / "audit", with_private_logs=True, attack_pairs="none")
    assert audit.ok, audit.checks[~audit.checks.ok]


def test_noisy_rounds_cannot_exceed_the_rounds() -> None:
    with pytest.raises(ValueError, match="noisy_rounds 4 exceeds rounds 3"):
        DecorParams(sigma=1.0, alpha=2.0, dimension=1, rounds=3, noisy_rounds=4)


def test_rows_asked_in_any_order_are_the_full_unroll_s_rows_and_the_model_is_built_once_per_run() -> None:
    topology = api.topology("ring", 5, protocol="decor", sigma=1.0, sigma_cor_ratio=2.0, rounds=4, noisy_rounds=3,
                            dimension=1, alpha=2.0, sensitivity=1.0, run_id="decor-rows")
    run = planned_transcript(topology, rounds=4, accelerated=False)
    every = [(w, t) for t in range(4) for w in range(5)]
    full = AUDITOR.message_rows(run, every)
    some = [(3, 2), (0, 0), (3, 2), (4, 3)]  # out of order, one twice
    picked = AUDITOR.message_rows(run, some)
    rows = [every.index(message) for message in some]
    np.testing.assert_array_equal(picked.inputs, full.inputs[rows])
    np.testing.assert_array_equal(picked.noise, full.noise[rows])
    assert picked.draws == full.draws and picked.holders == full.holders
    with pytest.raises(ValueError, match=r"no value \(0, 4\) in a run of 5 nodes and 4 rounds"):
        AUDITOR.message_rows(run, [(0, 4)])
    assert AUDITOR.message_rows(run, some) is picked  # a drop-out's findings and utility ask for the same rows
    model = AUDITOR.linear_model(run)
    assert AUDITOR.linear_model(run) is model  # the 2σ re-account and the canaries read the same model
    assert not model.inputs.flags.writeable and model.noise is not None and not model.noise.flags.writeable
    other = planned_transcript(topology, rounds=4, accelerated=False)
    assert AUDITOR.linear_model(other) is not model
