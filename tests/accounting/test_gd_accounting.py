"""Muffliato-GD/SGD accounting: the unrolled model, the MF sensitivity, Eq. 9 and its corrected form.

Weights are row-normalised on the graph with self-loops, W = D̃⁻¹(A + I) (W_vw = 1/(d_v + 1) for
w ∈ N[v]): with it and an observer that knows its own noise, the spec's Florentine figures
(0.33–0.54 at distance 2) come out for the first family, Acciaiuoli.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.directions import basic_upper, sign_lower
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.accountant import transcript_geometry
from coordinator_tools.audit.protocols.muffliato.paper import message_sum
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.paper import corrected_sum, eq9_sum, undercounted
from coordinator_tools.audit.protocols.muffliato_gd.sensitivity import gradient_sensitivity, observer_blocks, renyi
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import Schedule, fixed_schedule, unroll
from coordinator_tools.topology import generators
from tests.accounting.reference import dense_realized, drop, topology_from_graph

OWN_NOISE_UNKNOWN = ThreatModel(observer_knows_own_noise=False)
SCALAR, VECTOR = 1, 8  # gradient dimensions: one coordinate, and more than T's relaxation rank for T ≤ 5


def adjacency(graph: nx.Graph) -> np.ndarray:
    return nx.to_numpy_array(graph, nodelist=range(graph.number_of_nodes()))


def row_normalised(edges: np.ndarray) -> np.ndarray:
    """W = D̃⁻¹(A + I): every row of A + I divided by its sum."""
    closed = edges + np.eye(len(edges))
    return closed / closed.sum(axis=1, keepdims=True)


def with_drop_outs(weights: np.ndarray, heard: Sequence[Sequence[set[int]]]) -> Schedule:
    """One round per step; at step t node v hears only heard[t][v] and keeps the rest of its weight."""
    n = len(weights)
    mixing = []
    for senders in heard:
        realized = weights.copy()
        for v in range(n):
            missed = [w for w in np.flatnonzero(weights[v]) if w != v and w not in senders[v]]
            realized[v, v] += realized[v, missed].sum()
            realized[v, missed] = 0.0
        mixing.append((realized,))
    return Schedule(n=n, mixing=tuple(mixing),
                    received=tuple((tuple(frozenset(s) for s in senders),) for senders in heard))


def test_one_step_is_one_shot_averaging() -> None:
    """T = 1 with K rounds is Muffliato averaging: the same exact values (rational there) and Thm 1 = Eq. 9."""
    planned = planned_transcript(topology_from_graph(generators.erdos_renyi(10, seed=3), rounds=4, accelerated=False))
    transcript = drop(planned, 2, planned.topology.neighbours[2][0], 1)
    n = transcript.n
    schedule = Schedule(
        n=n,
        mixing=(tuple(dense_realized(transcript, k) for k in range(4)),),
        received=(tuple(tuple(frozenset(w for w, r in transcript.received[v] if r == k) for v in range(n))
                        for k in range(4)),),
    )  # fmt: skip
    sensitivity = gradient_sensitivity(unroll(schedule), VECTOR)
    averaging = transcript_geometry(transcript, method="rational").lower
    off = ~np.eye(n, dtype=bool)
    assert np.allclose(sensitivity.lower[off], averaging[off], rtol=0, atol=1e-12)
    assert np.all(sensitivity.upper[off] >= averaging[off]) and np.allclose(sensitivity.upper[off], averaging[off],
                                                                             rtol=0, atol=1e-9)
    assert np.allclose(eq9_sum(schedule)[off], message_sum(transcript)[off], rtol=1e-12, atol=0)
    assert unroll(schedule).linear_model().shared


def test_florentine_families_distance_two() -> None:
    """Spec example: K = 1, T = 10, α = 2, σ = Δ = 1. Eq. 9 gives non-neighbours 0; observer Acciaiuoli's exact
    losses from its five distance-2 families are 0.33–0.54 (all 70 distance-2 pairs: 0.33–2.38)."""
    families = nx.florentine_families_graph()
    graph = nx.convert_node_labels_to_integers(families, ordering="sorted", label_attribute="name")
    assert graph.number_of_nodes() == 15 and graph.nodes[0]["name"] == "Acciaiuoli"
    edges = adjacency(graph)
    schedule = fixed_schedule(row_normalised(edges), steps=10, rounds=1)
    sensitivity = gradient_sensitivity(unroll(schedule), VECTOR)
    exact = renyi(sensitivity.lower, alpha=2.0, sigma=1.0, sensitivity=1.0)
    paper = eq9_sum(schedule)
    hops = nx.floyd_warshall_numpy(graph, nodelist=range(15))
    far = hops[:, 0] == 2
    assert far.sum() == 5
    assert np.all(paper[far, 0] == 0) and np.allclose(paper[hops[:, 0] == 1, 0], 10.0)
    assert 0.33 <= exact[far, 0].min() < 0.34 and 0.53 < exact[far, 0].max() <= 0.54
    assert np.allclose(sensitivity.upper[far, 0], sensitivity.lower[far, 0], rtol=1e-9)
    distance_two = hops == 2
    assert sensitivity.lower[distance_two].min() > 0.33 and sensitivity.upper[distance_two].max() < 2.4
    assert undercounted(paper, sensitivity.lower)[distance_two].all()
    assert np.all(corrected_sum(schedule)[distance_two] >= sensitivity.upper[distance_two])


def random_schedule(rng: np.random.Generator) -> Schedule:
    """n ≤ 8, T ≤ 5, K ≤ 2 on a random connected graph, fixed or redrawn at every step."""
    n, steps, rounds = int(rng.integers(2, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 3))

    def connected() -> np.ndarray:
        while True:
            graph = nx.gnp_random_graph(n, rng.uniform(0.25, 0.8), seed=int(rng.integers(1 << 30)))
            if nx.is_connected(graph):
                return row_normalised(adjacency(graph))

    if rng.random() < 0.5:
        return fixed_schedule(connected(), steps=steps, rounds=rounds)
    plans = [fixed_schedule(connected(), steps=1, rounds=rounds) for _ in range(steps)]
    return Schedule(n=n, mixing=tuple(p.mixing[0] for p in plans), received=tuple(p.received[0] for p in plans))


def test_invariants_on_random_instances() -> None:
    """exact ≤ LDP everywhere; the interval closes for scalar gradients (T ≤ 12) and for vectors of dimension
    at least the relaxation's rank; vectors never reveal less than scalars; corrected ≥ exact wherever it is
    defined (K = 1); knowing less never reveals more."""
    rng = np.random.default_rng(2024)
    checked = 0
    for _ in range(100):
        schedule = random_schedule(rng)
        run = unroll(schedule)
        scalar, sensitivity = gradient_sensitivity(run, SCALAR), gradient_sensitivity(run, VECTOR)
        off = ~np.eye(schedule.n, dtype=bool)
        lower, upper = sensitivity.lower[off], sensitivity.upper[off]
        assert np.all(lower >= -1e-12) and np.all(lower <= upper + 1e-12) and np.all(upper <= sensitivity.ldp)
        for closed in (scalar, sensitivity):
            assert np.allclose(closed.upper[off], closed.lower[off], rtol=1e-6, atol=1e-9)
        assert np.all(scalar.lower[off] <= lower + 1e-12)
        assert np.all(gradient_sensitivity(run, VECTOR, OWN_NOISE_UNKNOWN).lower[off] <= upper + 1e-9)
        if len(schedule.mixing[0]) == 1:
            assert np.all(corrected_sum(schedule)[off] >= upper - 1e-9)
            checked += 1
        else:
            with pytest.raises(ValueError, match="one gossip round"):
                corrected_sum(schedule)
    assert checked > 40


def test_two_nodes_two_steps_by_hand() -> None:
    """W = [[1/2, 1/2], [1/2, 1/2]], T = 2, K = 1, observer 1, source 0; columns (0,0), (0,1) | (1,0), (1,1).

    Dropping −η, node 1 hears θ_0^{0,0} = (1, 0 | 0, 0) and θ_0^{1,0} = (1/2, 1 | 1/2, 0).
    * Knowing its own noise it deletes its columns: rows (1, 0), (1/2, 1) span R², X = I, sens² = 2Δ² = LDP.
    * Not knowing it: Gram–Schmidt gives (1, 0, 0, 0) and (0, 1, 1/2, 0)/√(5/4), so X = diag(1, 4/5), 9/5.
    * Missing θ_0^{0,0}: one row (1/2, 1), X = rrᵀ/‖r‖² = [[1/5, 2/5], [2/5, 4/5]] ≥ 0, sens² = Σ X = 9/5 = (aligned δ),
      below T λ_max = 2.
    * Step sizes (1, 2) on that view: r = (1/2, 2), Σ X = (5/2)² / (17/4) = 25/17.
    """
    weights = np.full((2, 2), 0.5)
    full = fixed_schedule(weights, steps=2, rounds=1)
    missed = with_drop_outs(weights, [[{1}, set()], [{1}, {0}]])
    cases = [
        (unroll(full), ThreatModel(), np.eye(2)),
        (unroll(full), OWN_NOISE_UNKNOWN, np.diag([1.0, 0.8])),
        (unroll(missed), ThreatModel(), np.array([[0.2, 0.4], [0.4, 0.8]])),
        (unroll(missed, step_sizes=[1.0, 2.0]), ThreatModel(), np.array([[0.25, 1.0], [1.0, 4.0]]) / 4.25),
    ]
    for run, threat_model, expected in cases:
        blocks = observer_blocks(run, 1, threat_model)
        assert np.allclose(blocks.standard[0], expected, atol=1e-14)
        assert np.allclose(blocks.fine[0], expected, atol=1e-14)
        sensitivity = gradient_sensitivity(run, VECTOR, threat_model)
        assert sensitivity.lower[0, 1] == pytest.approx(expected.sum(), abs=1e-13)
        assert sensitivity.upper[0, 1] == pytest.approx(expected.sum(), abs=1e-12)
        assert list(sensitivity.directions[0, 1]) == [1, 1]
    assert gradient_sensitivity(unroll(full, step_sizes=[3.0, 3.0]), VECTOR).lower[0, 1] == pytest.approx(2.0,
                                                                                                         abs=1e-13)
    assert eq9_sum(full)[0, 1] == 2.0 and corrected_sum(full)[0, 1] == 2.0


def test_sign_bounds_on_hand_blocks() -> None:
    """X = I − 11ᵀ/3: signs reach 3 − 1/3, Σ|X| = 4, Tλ_max = 3 (vector gradients at 120° reach 3).
    X = (1, −1)(1, −1)ᵀ/2: δ = (1, −1) reaches both bounds, 2. A rank-one alternating block with T = 14
    goes through the local search, which finds T."""
    centred = np.eye(3) - 1 / 3
    assert sign_lower(centred[None])[0][0] == pytest.approx(8 / 3)
    assert basic_upper(centred[None])[0] == pytest.approx(3.0)
    opposed = np.array([[1.0, -1.0], [-1.0, 1.0]]) / 2
    value, signs = sign_lower(opposed[None])
    assert value[0] == pytest.approx(2.0) and signs[0] @ [1, 1] == 0
    assert basic_upper(opposed[None])[0] == pytest.approx(2.0)
    alternating = np.resize([1.0, -1.0], 14)
    rank_one = np.outer(alternating, alternating) / 14
    value, signs = sign_lower(rank_one[None])
    assert value[0] == pytest.approx(14.0) and abs(signs[0] @ alternating) == 14


def test_linear_model_agrees_with_the_blocks() -> None:
    """The core's general formula on `linear_model(directions)` is dᵀXd for every pair, d the found signs (for
    scalar gradients over T ≤ 12 steps, the best signs are the exact value)."""
    schedule = fixed_schedule(row_normalised(adjacency(nx.cycle_graph(5))), steps=3, rounds=2)
    run = unroll(schedule)
    sensitivity = gradient_sensitivity(run, SCALAR)
    for v in range(run.n):
        geometry = view_geometry(run.linear_model(sensitivity.directions[:, v].astype(float)))
        sources = [u for u in range(run.n) if u != v]
        assert np.allclose(geometry.lower[sources, v], sensitivity.lower[sources, v], rtol=1e-9, atol=1e-12)


def test_eq9_and_the_corrected_form_miss_information_inside_and_across_steps() -> None:
    """Path 0–1–2, T = 1, K = 2: node 2 hears θ_1^{0,0} = x_1 + η_1, then (x_0 + x_1 + x_2 + η's)/3, so it
    solves for x_0 + η_0 (exact = LDP = 1) while Eq. 9 gives 1/3; the corrected form refuses K > 1.
    Same path, T = 2, K = 1, node 1 missing θ_0^{0,0}: exact 9/5 for 0 → 1 (the heard-only share sum is 3/2)."""
    path = row_normalised(adjacency(nx.path_graph(3)))
    averaging = fixed_schedule(path, steps=1, rounds=2)
    assert gradient_sensitivity(unroll(averaging), VECTOR).lower[0, 2] == pytest.approx(1.0, abs=1e-12)
    assert eq9_sum(averaging)[0, 2] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="one gossip round"):
        corrected_sum(averaging)
    missed = with_drop_outs(path, [[{1}, {2}, {1}], [{1}, {0, 2}, {1}]])
    assert gradient_sensitivity(unroll(missed), VECTOR).lower[0, 1] == pytest.approx(9 / 5, abs=1e-12)
    assert corrected_sum(missed)[0, 1] == 2.0


def test_one_sided_drop_outs_can_leave_the_corrected_form_below_exact() -> None:
    """A found instance (4 nodes, T = 3): the corrected form is evidence, not a bound; `undercounted` flags it."""
    edges = adjacency(nx.Graph([(0, 1), (0, 2), (0, 3), (1, 2)]))
    heard = [[{3}, {0}, set(), set()], [{1}, {0, 2}, {0, 1}, {0}], [{1}, {0}, {0, 1}, {0}]]
    schedule = with_drop_outs(row_normalised(edges), heard)
    exact = gradient_sensitivity(unroll(schedule), VECTOR).lower
    corrected = corrected_sum(schedule)
    assert corrected[1, 3] < exact[1, 3] - 5e-4
    assert undercounted(corrected, exact)[1, 3]
