"""Zero-sum averaging (Zip-DL) end to end in one process: the zero sums, the rows, the exact column by hand, the audit.

The networked run (real processes, mutual TLS) is tests/cluster/test_zero_sum_cluster.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import networkx as nx  # type: ignore[import-untyped]
import numpy as np
import pytest

from coordinator_tools import api
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript, planned_transcript
from coordinator_tools.audit.protocols.zero_sum import AUDITOR
from node.codec import from_tensor
from node.message import GOSSIP, kind_of
from node.protocols.zero_sum import SHARE_PURPOSE, share_step
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

ROUNDS = 3
DIMENSION = 3
CANARIES = 16
NAN = np.nan
OBSERVER, COALITION, EAVESDROPPER = ThreatModel(), ThreatModel(collusion=(0, 2)), ThreatModel(eavesdropper=True)


def one_round(graph: nx.Graph) -> Transcript:
    topology = api.topology(graph, protocol="zero-sum", sigma=1.0, rounds=1, dimension=1, alpha=2.0, run_id="zs")
    return planned_transcript(topology, rounds=1, accelerated=False)


@pytest.fixture(scope="module")
def ring_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[api.Run, np.ndarray]:
    folder = tmp_path_factory.mktemp("zero-sum")
    topology = api.topology("ring", 4, protocol="zero-sum", sigma=0.5, rounds=ROUNDS, dimension=DIMENSION,
                            alpha=8.0, run_id="zero-sum-ring")
    values = np.random.default_rng(0).uniform(-0.25, 0.25, size=(4, DIMENSION))
    run = api.run(topology, api.write_data(values, folder / "data"), folder / "run", canaries=CANARIES).check()
    return run, values


def test_each_node_s_shares_sum_to_zero_every_round(ring_run: tuple[api.Run, np.ndarray]) -> None:
    # Z_{a→j} = Y_{a→j} − (1/(d_a W_aj)) Σ_k W_ak Y_{a→k} from the logged draws, by the paper's formula; the weighted
    # sum over the closed neighbourhood vanishes, and the values a sent differ by exactly their shares' difference.
    run, _ = ring_run
    n = run.topology.n
    for a in range(n):
        row = run.topology.weight_row(a)
        logged = {int(d.step): from_tensor(d.value) for d in read_log(run.rundir / f"node-{a}" / PRIVATE_LOG_NAME)
                  .of_kind("noise") if d.purpose == SHARE_PURPOSE}
        assert sorted(logged) == sorted(share_step(t, j, n) for t in range(ROUNDS) for j in row)
        sent = {(int(r.peer), int(r.round)): from_tensor(r.payload)
                for r in read_log(run.rundir / f"node-{a}" / VIEW_LOG_NAME).of_kind("sent") if kind_of(r) == GOSSIP}
        for t in range(ROUNDS):
            y = {j: logged[share_step(t, j, n)] for j in row}
            total = sum(row[k] * y[k] for k in row)
            z = {j: y[j] - total / (len(row) * row[j]) for j in row}
            largest = max(float(np.max(np.abs(share))) for share in z.values())
            assert largest > 0.1
            assert np.max(np.abs(sum(row[j] * z[j] for j in row))) <= 1e-12 * largest
            j, k = sorted(run.topology.neighbours[a])
            np.testing.assert_allclose(sent[(j, t)] - sent[(k, t)], z[j] - z[k], rtol=0, atol=1e-12)


def test_no_round_moves_the_network_sum(ring_run: tuple[api.Run, np.ndarray]) -> None:
    run, values = ring_run
    np.testing.assert_allclose(run.estimates.to_numpy().sum(axis=0), values.sum(axis=0), rtol=0, atol=1e-12)


def test_the_audit_passes_honest_under_each_threat_model(ring_run: tuple[api.Run, np.ndarray],
                                                         tmp_path: Path) -> None:
    run, _ = ring_run
    observer = api.audit(run, tmp_path / "observer", with_private_logs=True, attack_pairs="none")
    assert observer.ok, observer.checks[~observer.checks.ok]
    canaries = observer.report["canaries"]
    assert isinstance(canaries, dict) and canaries["pairs"] == 12  # the canary audit ran on every pair
    payloads = observer.checks.set_index("name").loc["every logged value is its declared linear combination of "
                                                     "inputs and draws", "detail"]
    assert str(payloads).startswith(f"{2 * 4 * 2 * ROUNDS} logged payloads")  # each sent and received copy
    eavesdropper = api.audit(run, tmp_path / "eavesdropper", attack_pairs="none", eavesdropper=True)
    assert eavesdropper.ok
    coalition = api.audit(run, tmp_path / "coalition", attack_pairs="none", colluders=(0, 2))
    assert coalition.ok


def test_rows_match_the_paper_s_virtual_system() -> None:
    # Zip-DL §5.2: n² virtual nodes (a, j), X̂^{t+1} = M̂ Ŵ (X̂^t + Ĉ Ŷ^t); the value a sends j in round t is
    # X̂^t_(a,j) + (Ĉ Ŷ^t)_(a,j). Built here from the paper's matrices, compared with the auditor's rows.
    topology = api.topology(nx.path_graph(4), protocol="zero-sum", sigma=1.0, rounds=ROUNDS, dimension=1,
                            alpha=2.0, run_id="zs")
    n, size = topology.n, topology.n ** 2
    weights = topology.gossip_matrix().toarray()
    virtual_w, mixing, correlation = np.zeros((size, size)), np.kron(np.eye(n), np.ones((n, n))), np.zeros((size,
                                                                                                           size))
    for a in range(n):
        closed = np.flatnonzero(weights[a])
        for v in closed:
            virtual_w[a * n + v, v * n + a] = weights[a, v]
            for j in closed:
                correlation[a * n + v, a * n + j] = ((len(closed) - 1) / len(closed) if j == v
                                                     else -weights[a, j] / (len(closed) * weights[a, v]))
    state_inputs, state_noise = np.kron(np.eye(n), np.ones((n, 1))), np.zeros((size, ROUNDS * size))
    expected = {}
    for t in range(ROUNDS):
        shares = np.zeros((size, ROUNDS * size))
        shares[:, t * size:(t + 1) * size] = correlation
        for a in range(n):
            for j in topology.neighbours[a]:
                expected[(a, t, j)] = (state_inputs[a * n + j], state_noise[a * n + j] + shares[a * n + j])
        state_inputs = mixing @ virtual_w @ state_inputs
        state_noise = mixing @ virtual_w @ (state_noise + shares)
    values = sorted(expected)
    rows = AUDITOR.addressed_rows(planned_transcript(topology, rounds=ROUNDS, accelerated=False), values)
    column = [t * size + a * n + step % n for a, step in rows.draws for t in [step // n]]
    for i, value in enumerate(values):
        np.testing.assert_allclose(rows.inputs[i], expected[value][0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(rows.noise[i], expected[value][1][column], rtol=0, atol=1e-12)
        assert np.count_nonzero(expected[value][1]) == np.count_nonzero(rows.noise[i])  # no draw left out


def test_exact_column_by_hand_on_a_three_node_path() -> None:
    # Metropolis weights W_00 = W_22 = 2/3, all others 1/3. Z_{0→1} = ½Y_01 − Y_00 (var 5/4); node 1's
    # Z_{1→0} = ⅔Y_10 − ⅓Y_11 − ⅓Y_12 and Z_{1→2} alike: var 2/3 each, covariance −1/3. Node 0 sees x1 + Z_{1→0}:
    # p = 3/2; node 1 sees x0 and x2 under independent 5/4. A coalition {0, 2} sums node 1's two values:
    # 2 x1 + (⅓Y_10 + ⅓Y_12 − ⅔Y_11), var 2/3, p = 4/(2/3) = 6: the zero sum hands the coalition four times what
    # one value gives, twice the paper's sum of marginals. The eavesdropper sees all four values: 4/5, 6, 4/5.
    model = AUDITOR.linear_model(one_round(nx.path_graph(3)))
    np.testing.assert_allclose(view_geometry(model, OBSERVER).upper,
                               [[NAN, 4 / 5, 0.0], [3 / 2, NAN, 3 / 2], [0.0, 4 / 5, NAN]], atol=1e-12)
    np.testing.assert_allclose(view_geometry(model, COALITION).upper,
                               [[NAN, 4 / 5, NAN], [6.0, NAN, 6.0], [NAN, 4 / 5, NAN]], atol=1e-12)
    np.testing.assert_allclose(view_geometry(model, EAVESDROPPER).upper,
                               [[NAN, 4 / 5, 4 / 5], [6.0, NAN, 6.0], [4 / 5, 4 / 5, NAN]], atol=1e-12)


def test_exact_column_by_hand_on_a_four_node_ring() -> None:
    # Every weight 1/3, d = 3: Z_{a→j} = Y_aj − ⅓ΣY, var 2/3, two of a's shares covary by −1/3. A curious node sees
    # each neighbour once (p = 3/2) and its opposite not at all; the coalition {0, 2} and the eavesdropper see both
    # of a node's values: p = 6.
    model = AUDITOR.linear_model(one_round(nx.cycle_graph(4)))
    q = 3 / 2
    np.testing.assert_allclose(view_geometry(model, OBSERVER).upper,
                               [[NAN, q, 0, q], [q, NAN, q, 0], [0, q, NAN, q], [q, 0, q, NAN]], atol=1e-12)
    coalition = view_geometry(model, COALITION).upper
    np.testing.assert_allclose(coalition[[1, 3]][:, [0, 2]], np.full((2, 2), 6.0), atol=1e-12)
    np.testing.assert_allclose(coalition[[0, 2, 3], 1], [q, q, 0.0], atol=1e-12)  # node 1 alone
    eavesdropper = view_geometry(model, EAVESDROPPER).upper
    np.testing.assert_allclose(eavesdropper[~np.eye(4, dtype=bool)], np.full(12, 6.0), atol=1e-12)


def test_paper_column_by_hand_on_a_three_node_path() -> None:
    # One round: Theorem 5.12 adds each received value's marginal loss, so it is the exact column for one curious
    # node (each sees one value per source) and Remark 5.10's coalition gets 3/2 + 3/2 = 3, half the exact 6.
    run = one_round(nx.path_graph(3))
    np.testing.assert_allclose(AUDITOR.paper_sum(run, OBSERVER),
                               [[NAN, 4 / 5, 0.0], [3 / 2, NAN, 3 / 2], [0.0, 4 / 5, NAN]], atol=1e-12)
    np.testing.assert_allclose(AUDITOR.paper_sum(run, COALITION)[1, [0, 2]], [3.0, 3.0], atol=1e-12)
    losses = AUDITOR.account(run, sigma=1.0, sensitivity=1.0, alpha=2.0, delta=1e-5, threat_model=EAVESDROPPER)
    assert np.isnan(losses.paper_rdp).all()  # outside the paper's threat model
    np.testing.assert_allclose(losses.exact_rdp_upper[1, 0], 2.0 * 6.0 / 2, atol=1e-9)  # α μ²/2 with μ² = 6
    # The local-DP baseline releases each node's round values: 4/5 at a leaf, 6 in the middle (the eavesdropper's).
    assert losses.ldp_source_rdp is not None
    np.testing.assert_allclose(losses.ldp_source_rdp, [4 / 5, 6.0, 4 / 5], atol=1e-9)


def test_a_node_drawing_a_tenth_of_its_noise_fails_the_canary_audit_and_is_named(tmp_path: Path) -> None:
    topology = api.topology("ring", 4, protocol="zero-sum", sigma=0.5, rounds=2, dimension=DIMENSION, alpha=8.0,
                            run_id="zero-sum-broken")
    values = np.random.default_rng(2).uniform(-0.25, 0.25, size=(4, DIMENSION))
    run = api.run(topology, api.write_data(values, tmp_path / "data"), tmp_path / "run", canaries=400,
                  breaks={0: "noise-scale=0.1"}).check()
    audit = api.audit(run, tmp_path / "audit", attack_pairs="none")
    failing = audit.checks[~audit.checks.ok]
    noise = failing[failing.name.str.startswith("noise in the run's messages")]
    assert len(noise) == 1 and "node 0" in str(noise.detail.iloc[0])


def test_a_dropped_value_leaves_its_sender_s_shares_uncancelled_in_the_rows() -> None:
    # Path 0-1-2, two rounds; node 1 drops node 0's round-0 value, so its weight 1/3 goes to node 1's kept value:
    # x_1^1 = ⅔(x_1 + Z_{1→1}) + ⅓(x_2 + Z_{2→1}). The network's sum after round 0 moves by node 0's share that
    # nobody mixed in, −⅓ Z_{0→1} = −⅓(½Y_01 − Y_00), and by the extra weight on node 1's kept share, ⅓ Z_{1→1}.
    topology = api.topology(nx.path_graph(3), protocol="zero-sum", sigma=1.0, rounds=2, dimension=1, alpha=2.0,
                            run_id="zs")
    planned = planned_transcript(topology, rounds=2, accelerated=False)
    used = (planned.used[0], (frozenset({2}), frozenset({0, 2})), planned.used[2])
    received = (planned.received[0], ((2, 0), (0, 1), (2, 1)), planned.received[2])
    run = replace(planned, used=used, received=received)
    values = [(1, 1, 0), (0, 1, 1), (2, 1, 1)]
    rows = AUDITOR.addressed_rows(run, values)
    column = {draw: i for i, draw in enumerate(rows.draws)}

    def y(a: int, t: int, k: int) -> int:
        return column[(a, share_step(t, k, 3))]

    np.testing.assert_allclose(rows.inputs[0], [0.0, 2 / 3, 1 / 3], atol=1e-12)
    expected = np.zeros(len(rows.draws))
    for k, weight in {0: 1 / 3, 1: 1 / 3, 2: 1 / 3}.items():  # ⅔ Z_{1→1} = ⅔(⅔Y_11 − ⅓Y_10 − ⅓Y_12)
        expected[y(1, 0, k)] += (2 / 3) * ((k == 1) - weight)
    expected[y(2, 0, 1)] += (1 / 3) * 0.5  # ⅓ Z_{2→1} = ⅓(½Y_21 − Y_22)
    expected[y(2, 0, 2)] -= 1 / 3
    for k in range(3):  # round 1's share for node 0: Z_{1→0} = Y_10 − ⅓ΣY
        expected[y(1, 1, k)] += (k == 0) - 1 / 3
    np.testing.assert_allclose(rows.noise[0], expected, atol=1e-12)
    # Σ_v x_v^2 from round 1's values (every one used) keeps round 0's leftover: −⅓ Z_{0→1} + ⅓ Z_{1→1}.
    weights = topology.gossip_matrix().toarray()
    last = [(w, 1, v) for w, v in zip(*np.nonzero(weights))]  # every value of round 1, kept shares included
    finals = AUDITOR.addressed_rows(run, last)
    total = sum(weights[v, w] * finals.noise[i] for i, (w, _, v) in enumerate(last))
    leftover = np.zeros(len(rows.draws))
    leftover[y(0, 0, 1)], leftover[y(0, 0, 0)] = -(1 / 3) * 0.5, 1 / 3
    for k in range(3):
        leftover[y(1, 0, k)] = (1 / 3) * ((k == 1) - 1 / 3)
    np.testing.assert_allclose(total, leftover, atol=1e-12)
