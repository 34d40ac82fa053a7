"""Secure-neighbourhood gossip end to end in one process (`--virtual`): masks cancel, exact and paper by hand, audits.

The networked run (real processes, mutual TLS) is tests/cluster/test_secure_neighbourhood_cluster.py.
"""

from __future__ import annotations

import struct
from pathlib import Path

import networkx as nx  # type: ignore[import-untyped]
import numpy as np
import pytest

from coordinator_tools import api
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.secure_neighbourhood import AUDITOR, paper_factor
from node.codec import from_tensor
from node.message import GOSSIP, kind_of
from node.pairwise_secrets import KEY_SHARE, SECRET_PURPOSE, edge_sign
from node.protocols.secure_neighbourhood import MASK_PURPOSE, NOISE_PURPOSE, co_neighbours, mask_step
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

ROUNDS = 3
DIMENSION = 3
OBSERVER, COALITION, EAVESDROPPER = ThreatModel(), ThreatModel(collusion=(0, 1)), ThreatModel(eavesdropper=True)


def draws(node_dir: Path, purpose: str) -> dict[int, np.ndarray]:
    """step -> value of a node's private draws of `purpose`."""
    return {int(d.step): from_tensor(d.value) for d in read_log(node_dir / PRIVATE_LOG_NAME).of_kind("noise")
            if d.purpose == purpose}


def received(node_dir: Path) -> dict[tuple[int, int], np.ndarray]:
    """(sender, round) -> the round value a node received from that neighbour."""
    return {(r.peer, r.round): from_tensor(r.payload) for r in read_log(node_dir / VIEW_LOG_NAME).of_kind("received")
            if kind_of(r) == GOSSIP}


@pytest.fixture(scope="module")
def ring_run(tmp_path_factory: pytest.TempPathFactory) -> api.Run:
    folder = tmp_path_factory.mktemp("secure-neighbourhood")
    topology = api.topology("ring", 4, protocol="secure-neighbourhood", sigma=0.5, mask_ratio=10.0, rounds=ROUNDS,
                            dimension=DIMENSION, alpha=8.0, run_id="secure-neighbourhood-ring")
    values = np.random.default_rng(0).uniform(-0.25, 0.25, size=(4, DIMENSION))
    return api.run(topology, api.write_data(values, folder / "data"), folder / "run", canaries=16).check()


def test_the_masks_cancel_in_every_neighbourhood_sum(ring_run: api.Run) -> None:
    # Node v's sum of what it received, against the same values with each sender's masks taken out (from the
    # senders' private logs): equal to 1e-12 of the masks' size, though each value alone is far from its term.
    topology, n = ring_run.topology, ring_run.topology.n
    masks = {j: draws(ring_run.rundir / f"node-{j}", MASK_PURPOSE) for j in range(n)}
    for v in range(n):
        values = received(ring_run.rundir / f"node-{v}")
        for t in range(ROUNDS):
            masked = np.sum([values[j, t] for j in topology.neighbours[v]], axis=0)
            unmasked = np.sum([values[j, t] - sum(edge_sign(j, k) * masks[j][mask_step(t, v, k, n)]
                                                  for k in topology.neighbours[v] if k != j)
                               for j in topology.neighbours[v]], axis=0)
            largest = max(float(np.max(np.abs(masks[j][mask_step(t, v, k, n)])))
                          for j in topology.neighbours[v] for k in topology.neighbours[v] if k != j)
            assert largest > 1.0  # the masks are there, at σ_m = 5
            assert np.max(np.abs(values[topology.neighbours[v][0], t] - unmasked)) > 0.5
            assert np.max(np.abs(masked - unmasked)) <= 1e-12 * largest


def test_the_network_sum_moves_by_the_node_noise_alone(ring_run: api.Run) -> None:
    n = ring_run.topology.n
    inputs = np.sum([from_tensor(read_log(ring_run.rundir / f"node-{v}" / PRIVATE_LOG_NAME).of_kind("private_input")[0]
                                 .value) for v in range(n)], axis=0)
    noise = np.sum([d for v in range(n) for d in draws(ring_run.rundir / f"node-{v}", NOISE_PURPOSE).values()], axis=0)
    np.testing.assert_allclose(ring_run.estimates.to_numpy().sum(axis=0), (inputs + noise)[:DIMENSION], rtol=0,
                               atol=1e-12)


def test_secrets_are_agreed_with_co_neighbours_only_and_no_secret_or_mask_is_in_a_view_log(ring_run: api.Run) -> None:
    topology = ring_run.topology
    for v in range(topology.n):
        node_dir = ring_run.rundir / f"node-{v}"
        view = (node_dir / VIEW_LOG_NAME).read_bytes()
        secrets = draws(node_dir, SECRET_PURPOSE)
        assert sorted(secrets) == list(co_neighbours(topology, v)) == [(v + 2) % 4]  # the node across the ring
        for secret in secrets.values():
            assert bytes(secret.astype(np.uint8)) not in view and secret.astype("<f8").tobytes() not in view
        for mask in draws(node_dir, MASK_PURPOSE).values():
            assert all(struct.pack("<d", value) not in view for value in mask)
        shares = {r.peer for r in read_log(node_dir / VIEW_LOG_NAME).of_kind("received") if kind_of(r) == KEY_SHARE}
        assert shares == {(v + 2) % 4}  # the view records that an agreement happened, with whom


def test_the_audit_passes_under_each_threat_model_with_the_canary_audit(ring_run: api.Run, tmp_path: Path) -> None:
    observer = api.audit(ring_run, tmp_path / "observer", with_private_logs=True, attack_pairs="none")
    assert observer.ok, observer.checks[~observer.checks.ok]
    canaries = observer.report["canaries"]
    assert isinstance(canaries, dict) and canaries["pairs"] == 12
    pairs = observer.pairs
    assert np.all(pairs.paper_rdp <= pairs.exact_rdp * (1 + 1e-9))  # the ideal summation reveals less
    assert np.all(pairs.paper_rdp[pairs.hop_distance == 1] < pairs.exact_rdp[pairs.hop_distance == 1])  # masks leak
    eavesdropper = api.audit(ring_run, tmp_path / "eavesdropper", attack_pairs="none", eavesdropper=True)
    assert eavesdropper.ok, eavesdropper.checks[~eavesdropper.checks.ok]
    assert eavesdropper.pairs.paper_rdp.isna().all() and eavesdropper.pairs.exact_rdp.notna().all()
    coalition = api.audit(ring_run, tmp_path / "coalition", attack_pairs="none", colluders=(0, 1))
    assert coalition.ok, coalition.checks[~coalition.checks.ok]
    joint = coalition.report["collusion"]
    assert isinstance(joint, dict) and [loss["paper_rdp"] for loss in joint["losses"]] == [None, None]
    assert any("does not cover a coalition" in note for note in joint["notes"])
    # Node 0 holds the masks of pair (0, 2), node 1 those of (1, 3): together they unmask what 2 and 3 send them.
    assert all(loss["exact_eps_upper"] > loss["best_member_exact_eps_upper"] for loss in joint["losses"])


def one_round(graph: nx.Graph, ratio: float) -> tuple[LinearGaussianModel, object]:
    topology = api.topology(graph, protocol="secure-neighbourhood", sigma=1.0, mask_ratio=ratio, rounds=1,
                            dimension=1, alpha=2.0, sensitivity=1.0, run_id="secure-neighbourhood-hand")
    run = planned_transcript(topology, rounds=1, accelerated=False)
    return AUDITOR.linear_model(run), run


@pytest.mark.parametrize("ratio", [1 / 3, 2.0])
def test_exact_and_paper_by_hand_on_a_three_node_path(ratio: float) -> None:
    # Metropolis weights on 0 – 1 – 2: W_01 = W_21 = 1/3. Node 1 receives y0/3 + m and y2/3 − m (m at std r, held by
    # 0 and 2): for u = 0, p = e1ᵀ Cov⁻¹ e1 / 9 with Cov = [[1/9 + r², −r²], [−r², 1/9 + r²]], p = (1 + 9r²)/(1 + 18r²).
    # Nodes 0 and 2 have one neighbour each, so node 1's values reach them unmasked (p = 1) and nothing of the other
    # end does (p = 0). The ideal sum y0/3 + y2/3 gives node 1 p = 1/2. Columns are observers, rows sources.
    model, run = one_round(nx.path_graph(3), ratio)
    p = (1 + 9 * ratio**2) / (1 + 18 * ratio**2)
    np.testing.assert_allclose(view_geometry(model, OBSERVER).upper,
                               [[np.nan, p, 0.0], [1.0, np.nan, 1.0], [0.0, p, np.nan]], atol=1e-12)
    np.testing.assert_allclose(paper_factor(run, OBSERVER),  # type: ignore[arg-type]
                               [[np.nan, 0.5, 0.0], [1.0, np.nan, 1.0], [0.0, 0.5, np.nan]], atol=1e-12)
    np.testing.assert_allclose(view_geometry(model, EAVESDROPPER).upper[:, 0], [np.nan, 1.0, p], atol=1e-12)
    # The coalition {0, 1} holds m: y2/3 − m is y2/3 to it, so node 2's value is unmasked (p = 1).
    np.testing.assert_allclose(view_geometry(model, COALITION).upper[2, :2], [1.0, 1.0], atol=1e-12)


@pytest.mark.parametrize("ratio", [1 / 3, 2.0])
def test_exact_and_paper_by_hand_on_a_four_node_ring(ratio: float) -> None:
    # Every weight 1/3. Node 0 receives y1/3 + a and y3/3 − a (a at std r, held by 1 and 3): p = (1 + 9r²)/(1 + 18r²)
    # for u = 1, 3 and 0 for u = 2; the ideal sum gives 1/2. An eavesdropper also sees y1/3 + b, y3/3 − b (node 2's
    # mask b, independent): with c = 9r², rows y1 + 3a, y3 − 3a, y1 + 3b (the fourth is their combination) give
    # p = (c + 2)/(2(c + 1)), the same for every pair. The coalition {0, 1} holds a (node 1's) and node 0's masks:
    # node 3's value to 0 and node 2's to 1 arrive unmasked (p = 1); node 2 → node 3 reaches it through 0's view.
    model, run = one_round(nx.cycle_graph(4), ratio)
    p, c = (1 + 9 * ratio**2) / (1 + 18 * ratio**2), 9 * ratio**2
    observer = view_geometry(model, OBSERVER).upper
    np.testing.assert_allclose(observer[:, 0], [np.nan, p, 0.0, p], atol=1e-12)
    np.testing.assert_allclose(paper_factor(run, OBSERVER)[:, 0], [np.nan, 0.5, 0.0, 0.5], atol=1e-12)  # type: ignore[arg-type]
    outsider = view_geometry(model, EAVESDROPPER).upper
    np.testing.assert_allclose(outsider[~np.eye(4, dtype=bool)], (c + 2) / (2 * (c + 1)), atol=1e-12)
    np.testing.assert_allclose(view_geometry(model, COALITION).upper[2:, 0], [1.0, 1.0], atol=1e-12)
    assert np.all(np.isnan(paper_factor(run, COALITION))) and np.all(np.isnan(paper_factor(run, EAVESDROPPER)))  # type: ignore[arg-type]
