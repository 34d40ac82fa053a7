"""Exact Gaussian loss of a whole view: reconstruction, rational vs float interval, threat models."""

from __future__ import annotations

import warnings

import networkx as nx
import numpy as np
import pytest
from flint import fmpq, fmpq_mat

from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.exact import exact_mu
from coordinator_tools.audit.exact import view_geometry as exact_view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.accountant import (
    transcript_geometry as view_geometry,
)
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.topology import generators
from tests.accounting.reference import dense_geometry, drop, topology_from_graph

OWN_NOISE_UNKNOWN = ThreatModel(observer_knows_own_noise=False)


def path_transcript(rounds: int):
    return planned_transcript(topology_from_graph(nx.path_graph(4), rounds=rounds, accelerated=False))


@pytest.mark.parametrize("method", ["rational", "float"])
@pytest.mark.parametrize("threat_model", [ThreatModel(), OWN_NOISE_UNKNOWN])
def test_node_3_solves_for_node_0_on_the_path(method, threat_model):
    """Four independent combinations of four noisy inputs: node 3 reconstructs x_0 + η_0."""
    geometry = view_geometry(path_transcript(4), threat_model, method=method)
    assert geometry.lower[0, 3] == pytest.approx(1.0, abs=1e-12)
    assert geometry.reconstructable[0, 3]


def test_hearing_a_neighbours_round_0_value_is_local_dp():
    for graph in (generators.ring(9), generators.star(6), generators.erdos_renyi(14, seed=1)):
        transcript = planned_transcript(topology_from_graph(graph, rounds=2, accelerated=True))
        for threat_model in (ThreatModel(), OWN_NOISE_UNKNOWN):
            geometry = view_geometry(transcript, threat_model, method="rational")
            for u, v in ((e.u, e.v) for e in transcript.topology.edges):
                assert geometry.lower[u, v] == 1.0 and geometry.reconstructable[u, v]
                assert geometry.lower[v, u] == 1.0 and geometry.reconstructable[v, u]


def test_on_the_complete_graph_everyone_sees_everything():
    topology = topology_from_graph(generators.complete(7), rounds=1, accelerated=False)
    geometry = view_geometry(planned_transcript(topology))
    off = ~np.eye(7, dtype=bool)
    assert geometry.reconstructable[off].all() and (geometry.lower[off] == 1.0).all()


def test_drop_out_recomputed_by_hand():
    """Node 2 misses x_1^1 (T = 3): node 3's rows on x_0..x_2 become e_2, (0,1,1)/3, (0,2,3)/9."""
    planned = view_geometry(path_transcript(3), method="rational")
    dropped = view_geometry(drop(path_transcript(3), 2, 1, 1), method="rational")
    assert planned.lower[0, 3] == 1.0 and planned.reconstructable[0, 3]
    assert dropped.lower[0, 3] == 0.0 and not dropped.reconstructable[0, 3]
    assert dropped.lower[1, 3] == 1.0  # span{e_2, e_1}


def test_not_knowing_own_noise_leaves_a_partial_projection():
    """Eq. 5, T = 2: node 3 hears z_2 and (z_1 + z_2 + z_3)/3 but knows only x_3, so it sees x_1 + η_1 + η_3.

    Rows on z_0..z_3: e_2 and (0, 1, 1, 1)/3; the projection of e_1 on their span is 1/2, and x_0 is unseen.
    """
    geometry = view_geometry(path_transcript(2), OWN_NOISE_UNKNOWN, method="rational")
    assert geometry.lower[1, 3] == 0.5 and geometry.lower[0, 3] == 0.0 and not geometry.reconstructable[1, 3]
    mu_lower, mu_upper = exact_mu(geometry, sigma=2.0, sensitivity=1.0)
    assert mu_lower[1, 3] == pytest.approx(np.sqrt(0.5) / 2, rel=1e-15)
    assert np.array_equal(mu_lower, mu_upper, equal_nan=True)
    assert view_geometry(path_transcript(2), method="rational").lower[1, 3] == 1.0  # knowing η_3 removes it


CASES = {
    "erdos_renyi": (generators.erdos_renyi(30, seed=3), 8),
    "grid": (generators.grid(rows=5, cols=6), 10),
    "hypercube": (generators.hypercube(32), 9),
}


@pytest.mark.parametrize("accelerated", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_float_interval_never_understates_the_rational_value(name, accelerated):
    graph, rounds = CASES[name]
    transcript = planned_transcript(topology_from_graph(graph, rounds=rounds, accelerated=accelerated))
    exact = view_geometry(transcript, method="rational")
    interval = view_geometry(transcript, method="float")
    off = ~np.eye(transcript.n, dtype=bool)
    assert interval.method == "float-interval" and exact.method == "rational" and not interval.unresolved
    assert (interval.lower[off] <= exact.lower[off]).all() and (exact.lower[off] <= interval.upper[off]).all()
    assert np.max(interval.upper[off] - interval.lower[off]) < 1e-9
    assert np.array_equal(exact.reconstructable, interval.reconstructable)
    assert (interval.lower[off] >= 0).all() and (interval.upper[off] <= 1).all()


@pytest.mark.parametrize("accelerated", [True, False])
def test_the_64_node_ring_interval_holds_the_rational_value_tightly(accelerated):
    """T = 26: each node hears 2T = 52 values and reconstructs exactly the 52 nodes within 26 hops.

    The raw rows' singular values fall far below rounding here: a rank cut-off on them put the
    lower end up to 0.93 under the rational value on 1,024 pairs (0.94 on 768 without
    acceleration). The Krylov basis has residuals near 0.3, so the interval is about 4e-11 wide.
    """
    transcript = planned_transcript(topology_from_graph(generators.ring(64), rounds=26, accelerated=accelerated))
    exact = view_geometry(transcript, method="rational")
    interval = view_geometry(transcript, method="float")
    off = ~np.eye(64, dtype=bool)
    assert interval.method == "float-interval" and not interval.unresolved
    assert (interval.lower[off] <= exact.lower[off]).all() and (exact.lower[off] <= interval.upper[off]).all()
    assert np.max(interval.upper[off] - interval.lower[off]) < 1e-9
    assert exact.reconstructable.sum() == 64 * 52 and np.array_equal(exact.reconstructable, interval.reconstructable)
    distance = np.abs(np.subtract.outer(np.arange(64), np.arange(64)))
    assert np.array_equal(exact.reconstructable[off], np.minimum(distance, 64 - distance)[off] <= 26)


def test_a_direction_below_rounding_leaves_the_observer_unresolved_then_rational():
    """Observer 49 hears z_0 and z_0 + 10⁻²⁰ z_1: exactly span{e_0, e_1}, so p = 1 for both.

    Floats see one direction and no modular certificate is offered: the upper end must be 1.
    "auto" then accounts that observer alone in rational arithmetic (n = 50 > RATIONAL_MAX_NODES).
    """
    n, tiny = 50, fmpq(1, 10**20)
    inputs = np.zeros((2, n))
    inputs[0, 0] = inputs[1, 0] = 1.0
    inputs[1, 1] = 1e-20
    exact_rows = fmpq_mat(2, n)
    exact_rows[0, 0] = exact_rows[1, 0] = 1
    exact_rows[1, 1] = tiny
    model = LinearGaussianModel(n=n, inputs=inputs, received=((),) * (n - 1) + ((0, 1),),
                                exact_rows=lambda: exact_rows)
    floats = exact_view_geometry(model, method="float")
    assert floats.unresolved == (n - 1,) and floats.method == "float-interval"
    assert floats.lower[1, n - 1] < 1e-12 and floats.upper[1, n - 1] == 1.0 and floats.ill_conditioned[1, n - 1]
    assert floats.lower[0, n - 1] == pytest.approx(1.0, abs=1e-12) and floats.upper[2, n - 1] == 0.0  # 2 is silent
    escalated = exact_view_geometry(model)
    assert escalated.method == "float-interval + rational"
    assert escalated.lower[1, n - 1] == escalated.upper[1, n - 1] == 1.0 and escalated.reconstructable[1, n - 1]


def test_float_lower_end_matches_the_dense_pseudo_inverse():
    transcript = planned_transcript(topology_from_graph(generators.erdos_renyi(40, seed=5), rounds=4, accelerated=True))
    off = ~np.eye(transcript.n, dtype=bool)
    assert np.allclose(view_geometry(transcript, method="float").lower[off], dense_geometry(transcript)[off], atol=1e-9)


def test_knowing_less_never_reveals_more():
    transcript = planned_transcript(topology_from_graph(generators.erdos_renyi(16, seed=7), rounds=3, accelerated=True))
    knows = view_geometry(transcript, method="rational").lower
    guesses = view_geometry(transcript, OWN_NOISE_UNKNOWN, method="rational").lower
    off = ~np.eye(16, dtype=bool)
    assert (guesses[off] <= knows[off]).all() and (guesses[off] < knows[off]).any()


def test_a_coalition_averages_away_its_members_noise():
    """Path 0-1-2-3-4, T = 2, own noise unknown: node 0 sees z_2 + η_0, node 4 sees z_2 + η_4 (1/2 each).

    Together they hold both, and the projection of e_2 on span{e_0 + e_2, e_2 + e_4} is 2/3.
    """
    transcript = planned_transcript(topology_from_graph(nx.path_graph(5), rounds=2, accelerated=False))
    alone = view_geometry(transcript, OWN_NOISE_UNKNOWN, method="rational").lower
    coalition = ThreatModel(observer_knows_own_noise=False, collusion=(0, 4))
    together = view_geometry(transcript, coalition, method="rational").lower
    assert alone[2, 0] == 0.5 and alone[2, 4] == 0.5
    assert together[2, 0] == pytest.approx(2 / 3, rel=1e-15) and together[2, 4] == together[2, 0]
    assert np.isnan(together[[0, 4], 0]).all()


def test_no_noise_gives_infinite_or_zero_mu_without_warnings():
    geometry = view_geometry(path_transcript(2), method="float")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lower, upper = exact_mu(geometry, sigma=0.0, sensitivity=1.0)
    assert lower[1, 3] == np.inf and upper[1, 3] == np.inf and lower[0, 3] == 0.0
