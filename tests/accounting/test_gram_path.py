"""The Gram path of the general formula: p from the m × m Gram of a view's noise map, against the SVD of all its draws.

A DECOR view has one column per draw (n + |E| per round), so the exact column reads a well-conditioned
view from its Gram matrix (`views.ObserverView.gram_matrices`, `core.gram_geometry`) and keeps the SVD
(`core.gaussian_geometry`, both rank cut-offs) for the rest. Here both are computed on every view of a
small DECOR run under each threat model and must agree; views the Gram cannot certify go to the SVD.
"""

from __future__ import annotations

import networkx as nx  # type: ignore[import-untyped]
import numpy as np
import pytest

from coordinator_tools import api
from coordinator_tools.audit.core import LinearGaussianModel, gaussian_geometry, gram, gram_geometry, row_ends
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.decor import AUDITOR
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.views import observer_views

THREAT_MODELS = [ThreatModel(), ThreatModel(collusion=(0, 3)), ThreatModel(eavesdropper=True)]


def decor_model(rounds: int, noisy_rounds: int | None = None) -> LinearGaussianModel:
    """DECOR on the 8-node hypercube, σ_cor = 2σ."""
    cube = nx.convert_node_labels_to_integers(nx.hypercube_graph(3))
    topology = api.topology(cube, protocol="decor", sigma=1.0, sigma_cor_ratio=2.0, rounds=rounds,
                            noisy_rounds=noisy_rounds, dimension=1, alpha=2.0, sensitivity=1.0, run_id="decor-cube")
    return AUDITOR.linear_model(planned_transcript(topology, rounds=rounds, accelerated=False))


@pytest.mark.parametrize("threat_model", THREAT_MODELS, ids=lambda t: t.name)
def test_the_gram_path_agrees_with_the_svd_on_every_decor_view(threat_model: ThreatModel) -> None:
    model = decor_model(rounds=4)
    geometry = view_geometry(model, threat_model)
    for v, view in enumerate(observer_views(model, threat_model)):
        fast = gram_geometry(*view.gram_matrices(model))
        assert fast is not None  # every DECOR view draws fresh noise per message: full rank, well conditioned
        low, high = gaussian_geometry(*view.matrices(model))
        np.testing.assert_allclose(low, high, rtol=1e-12)  # the SVD keeps every direction at both cut-offs
        np.testing.assert_allclose(fast, low, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(geometry.lower[view.sources(), v], geometry.upper[view.sources(), v])
        np.testing.assert_allclose(geometry.upper[view.sources(), v], low, rtol=1e-9, atol=1e-12)
        assert np.all(np.isfinite(low) & (low > 0))  # after four rounds every source reaches every view


def test_views_without_fresh_noise_go_to_the_svd() -> None:
    """Rounds after the noisy one repeat mixtures of its draws: rank-deficient views, which the Gram refuses."""
    model = decor_model(rounds=4, noisy_rounds=1)
    refused = 0
    geometry = view_geometry(model)
    for v, view in enumerate(observer_views(model, ThreatModel())):
        signal, noise_map = view.matrices(model)
        assert np.linalg.matrix_rank(noise_map) < noise_map.shape[0]
        refused += gram_geometry(*view.gram_matrices(model)) is None
        low, high = gaussian_geometry(signal, noise_map)
        np.testing.assert_array_equal(geometry.lower[view.sources(), v], low)
        np.testing.assert_array_equal(geometry.upper[view.sources(), v], high)
    assert refused == model.n


def test_an_ill_conditioned_noise_map_goes_to_the_svd() -> None:
    # Two looks at x_0 whose noise differs by 1e-3 of a draw: σ_min/σ_max ≈ 5e-4, below the Gram path's 1e-2.
    close = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1e-3]]) / np.sqrt(2)
    assert gram_geometry(np.ones((2, 1)), close @ close.T, 1e-15) is None
    apart = np.array([[1.0, 1.0, 0.0], [1.0, -1.0, 1.0]])
    assert gram_geometry(np.ones((2, 1)), apart @ apart.T, 1e-15) == pytest.approx([1 / 2 + 1 / 3], rel=1e-12)
    assert gram_geometry(np.ones((2, 1)), apart @ apart.T, 1e-3) is None  # a Gram known too loosely


def test_the_blocked_gram_is_the_gram() -> None:
    """Rows that end at different draws (a staircase, in blocks of 64 rows and out of order) give M Mᵀ."""
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(150, 400))
    ends = rng.integers(0, 401, size=150)
    matrix[np.arange(400)[None, :] >= ends[:, None]] = 0.0
    np.testing.assert_array_equal(row_ends(matrix), np.where(np.any(matrix != 0, axis=1), ends, 0))
    np.testing.assert_allclose(gram(matrix, row_ends(matrix)), matrix @ matrix.T, rtol=1e-13, atol=1e-12)
