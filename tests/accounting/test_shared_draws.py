"""Draws shared by the two ends of an edge (pairwise secrets), under each threat model, by hand.

One round of pairwise-cancelling noise: node i sends y_i = x_i + η_i + Σ_j ±v_ij to every
neighbour, v_ij one draw held by both ends of edge (i, j), + at the lower end and − at the
higher, so the v terms cancel in Σ_i y_i. A curious observer knows every draw it holds (its
edges' secrets included), a coalition every draw any member holds, an eavesdropper sees every
message and knows no draw. p = (A e_u)ᵀ (B S² Bᵀ)⁺ (A e_u), so μ² = (Δ/σ)² p.
"""

from __future__ import annotations

import numpy as np
import pytest

from coordinator_tools.audit.accountants import account_model
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.linear_rounds import draws_per_node
from coordinator_tools.audit.views import observer_view

OBSERVER = ThreatModel()
EAVESDROPPER = ThreatModel(eavesdropper=True)
NAN = np.nan


def pairwise_round(n: int, edges: list[tuple[int, int]], pairwise_scale: float,
                   holders_known: bool = True) -> LinearGaussianModel:
    """One value per node, received by its neighbours: draws η_0..η_{n-1} (scale 1), then one per edge.

    `holders_known` False declares each edge's draw as the lower end's alone (the model without shared draws).
    """
    noise = np.zeros((n, n + len(edges)))
    noise[:, :n] = np.eye(n)
    for k, (i, j) in enumerate(edges):
        noise[i, n + k], noise[j, n + k] = 1.0, -1.0
    neighbours = [sorted({j for i, j in edges if i == v} | {i for i, j in edges if j == v}) for v in range(n)]
    holders = tuple((v,) for v in range(n)) + tuple(edges)
    return LinearGaussianModel(
        n=n, inputs=np.eye(n), received=tuple(tuple(ws) for ws in neighbours), noise=noise,
        noise_owner=tuple(range(n)) + tuple(i for i, _ in edges),
        noise_scale=np.array([1.0] * n + [pairwise_scale] * len(edges)),
        noise_holders=holders if holders_known else None)


PATH = pairwise_round(3, [(0, 1), (1, 2)], 1.0)
RING = pairwise_round(4, [(0, 1), (1, 2), (2, 3), (0, 3)], 1.0)


def geometry(model: LinearGaussianModel, threat_model: ThreatModel) -> np.ndarray:
    """p [u, v], asserting the interval is tight."""
    result = view_geometry(model, threat_model)
    np.testing.assert_allclose(result.lower, result.upper, rtol=1e-12, atol=1e-12)
    return result.upper


def test_path_curious_observer_knows_the_secrets_on_its_edges() -> None:
    # y0 = x0 + η0 + a, y1 = x1 + η1 − a + b, y2 = x2 + η2 − b. Node 1 holds a and b: y0, y2 carry η alone (p = 1).
    # Node 0 sees y1 and holds a: η1 − ... + b stays unknown, variance 2 (p = 1/2); y1 says nothing of x2.
    expected = np.array([[NAN, 1.0, 0.0],
                         [0.5, NAN, 0.5],
                         [0.0, 1.0, NAN]])
    np.testing.assert_allclose(geometry(PATH, OBSERVER), expected, atol=1e-12)


def test_path_secret_unknown_to_its_holder_would_understate() -> None:
    # Declared as the lower end's alone, node 1 would not know a: y0 = x0 + η0 + a gives p = 1/2, not 1.
    p = geometry(pairwise_round(3, [(0, 1), (1, 2)], 1.0, holders_known=False), OBSERVER)
    assert p[0, 1] == pytest.approx(0.5)


def test_path_coalition_knows_every_members_draws() -> None:
    # {0, 2} both see y1 and hold a and b between them: only η1 is unknown, p = 1.
    p = geometry(PATH, ThreatModel(collusion=(0, 2)))
    assert p[1, 0] == pytest.approx(1.0) and p[1, 2] == pytest.approx(1.0)


def test_path_eavesdropper_sees_every_message_and_no_draw() -> None:
    # Cov(y) = [[2, −1, 0], [−1, 3, −1], [0, −1, 2]] (det 8); A = I, so p_u = (Cov⁻¹)_uu = 5/8, 1/2, 5/8 in every
    # observer column (the eavesdropper's view is the same for each; u = v is left out).
    p = geometry(PATH, EAVESDROPPER)
    expected = np.array([5 / 8, 1 / 2, 5 / 8])
    for v in range(3):
        sources = [u for u in range(3) if u != v]
        np.testing.assert_allclose(p[sources, v], expected[sources], atol=1e-12)


def test_ring_curious_observer() -> None:
    # Node 0 sees y1 = x1 + η1 − a + b and y3 = x3 + η3 − c − d, holds a and d: unknown η1 + b and η3 − c,
    # independent, variance 2 each: p = 1/2 for each neighbour, 0 for the opposite node.
    p = geometry(RING, OBSERVER)
    for v in range(4):
        assert p[(v + 1) % 4, v] == pytest.approx(0.5) and p[(v + 3) % 4, v] == pytest.approx(0.5)
        assert p[(v + 2) % 4, v] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(("members", "expected"), [
    ((0, 2), {1: 1.0, 3: 1.0}),  # opposite nodes hold all four secrets: only η1, η3 are left
    ((0, 1), {2: 2 / 3, 3: 2 / 3}),  # unknown η2 + c and η3 − c: Cov [[2, −1], [−1, 2]], inverse diagonal 2/3
])
def test_ring_coalition(members: tuple[int, int], expected: dict[int, float]) -> None:
    p = geometry(RING, ThreatModel(collusion=members))
    for u, value in expected.items():
        for v in members:
            assert p[u, v] == pytest.approx(value)


def test_ring_eavesdropper() -> None:
    # Cov(y) = 3I − adjacency of the 4-ring, eigenvalues 1, 3, 3, 5: (Cov⁻¹)_uu = (1 + 1/3 + 1/3 + 1/5)/4 = 7/15.
    p = geometry(RING, EAVESDROPPER)
    off_diagonal = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(p[off_diagonal], 7 / 15, atol=1e-12)


def test_eavesdropper_view_is_every_message_with_no_known_draw() -> None:
    view = observer_view(RING, 2, EAVESDROPPER)
    assert view.messages == (0, 1, 2, 3) and view.unknown_draws(RING) == list(range(8))
    assert view.known_inputs == [] and view.sources() == [0, 1, 3]


def test_losses_scale_the_geometry_and_shared_draws_are_no_release() -> None:
    # RDP = α μ²/2 with μ² = (Δ/σ)² p: ring eavesdropper, Δ = 1, σ = 2, α = 8 → 8 · (7/15)/4 / 2.
    losses = account_model(RING, np.full((4, 4), np.nan), sigma=2.0, sensitivity=1.0, alpha=8.0, delta=1e-5,
                           threat_model=EAVESDROPPER, releases=draws_per_node(RING))
    assert losses.exact_rdp_upper[0, 1] == pytest.approx(8 * (7 / 15) / 4 / 2)
    assert losses.threat_model.describe()["name"] == "eavesdropper"
    np.testing.assert_array_equal(draws_per_node(RING), [1, 1, 1, 1])


def test_holders_must_include_the_owner() -> None:
    with pytest.raises(ValueError, match="holders"):
        LinearGaussianModel(n=2, inputs=np.eye(2), received=((1,), (0,)), noise=np.eye(2), noise_owner=(0, 1),
                            noise_holders=((1,), (1,)))


def test_eavesdropper_colludes_with_no_node() -> None:
    with pytest.raises(ValueError, match="eavesdropper"):
        ThreatModel(eavesdropper=True, collusion=(0, 1))
