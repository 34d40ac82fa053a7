"""The linear-Gaussian core: one column per input and per noise draw, each draw with its own σ.

Hand cases for the general formula p = (A e_u)ᵀ (B S² Bᵀ)⁺ (A e_u), its agreement with the
projection code on an equivalent model, and the attack on a general model.
"""

from __future__ import annotations

import numpy as np
import pytest

from coordinator_tools.audit.attack import attack_pair
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.accountant import linear_model
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.topology import generators
from tests.accounting.reference import topology_from_graph

OWN_NOISE_UNKNOWN = ThreatModel(observer_knows_own_noise=False)


def one_observer(inputs: list[list[float]], noise: list[list[float]], owners: tuple[int, ...],
                 scales: list[float]) -> LinearGaussianModel:
    """Two nodes; node 1 receives every row."""
    rows = len(inputs)
    return LinearGaussianModel(n=2, inputs=np.array(inputs, dtype=float), received=((), tuple(range(rows))),
                               noise=np.array(noise, dtype=float), noise_owner=owners,
                               noise_scale=np.array(scales))


@pytest.mark.parametrize(
    ("inputs", "noise", "owners", "scales", "p"),
    [
        ([[1, 0]], [[1, 1]], (0, 0), [1.0, 2.0], 1 / 5),  # x_0 + η_a + η_b, σ_b = 2σ: μ² = Δ²/(5σ²)
        ([[1, 0], [1, 0]], [[1, 0], [0, 1]], (0, 0), [1.0, 1.0], 2.0),  # two independent looks at x_0
        ([[1, 0], [1, 0]], [[1, 1], [1, 1]], (0, 0), [1.0, 1.0], 1 / 2),  # the same look twice
        ([[1, 1]], [[1, 0]], (0, 1), [1.0, 1.0], 1.0),  # x_0 + x_1 + η_0 at node 1: its own input subtracted
        ([[1, 0]], [[0, 1]], (0, 1), [1.0, 1.0], np.inf),  # x_0 + η_1 at node 1, which drew η_1: no noise left
        ([[2, 0]], [[0, 0]], (0, 0), [1.0, 1.0], np.inf),  # no noise reaches the view
        ([[0, 1]], [[1, 1]], (0, 1), [1.0, 1.0], 0.0),  # the view does not depend on x_0
    ],
)
def test_general_formula_by_hand(inputs, noise, owners, scales, p) -> None:
    model = one_observer(inputs, noise, owners, scales)
    assert not model.shared
    geometry = view_geometry(model)
    assert geometry.method == "float-interval (general)"
    assert geometry.lower[0, 1] == pytest.approx(p, rel=1e-12) and geometry.upper[0, 1] == pytest.approx(p, rel=1e-12)


def test_unknown_own_noise_keeps_it_in_the_covariance() -> None:
    """x_0 + η_0 + η_1 at node 1: knowing η_1 pins x_0 + η_0 (p = 1), not knowing it halves p."""
    model = one_observer([[1, 0]], [[1, 1]], (0, 1), [1.0, 1.0])
    assert view_geometry(model).lower[0, 1] == pytest.approx(1.0, rel=1e-12)
    assert view_geometry(model, OWN_NOISE_UNKNOWN).lower[0, 1] == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("threat_model", [ThreatModel(), OWN_NOISE_UNKNOWN])
def test_general_formula_equals_the_projection_on_split_noise(threat_model: ThreatModel) -> None:
    """Each node's draw split into two independent halves of variance σ²/2: the same view, the general code."""
    transcript = planned_transcript(topology_from_graph(generators.erdos_renyi(12, seed=4), rounds=3,
                                                        accelerated=True))
    shared = linear_model(transcript)
    n = shared.n
    split = LinearGaussianModel(n=n, inputs=shared.inputs, received=shared.received,
                                noise=np.hstack([shared.inputs, shared.inputs]),
                                noise_owner=tuple(range(n)) * 2, noise_scale=np.full(2 * n, np.sqrt(0.5)))
    assert shared.shared and not split.shared
    exact = view_geometry(shared, threat_model, method="rational")
    general = view_geometry(split, threat_model)
    off = ~np.eye(n, dtype=bool)
    assert np.allclose(general.lower[off], exact.lower[off], rtol=0, atol=1e-9)
    assert (general.upper[off] >= exact.lower[off] - 1e-9).all()
    with pytest.raises(ValueError, match="rational"):
        view_geometry(split, method="rational")


def test_a_model_with_the_input_rows_as_one_draw_per_node_is_the_projection_case() -> None:
    transcript = planned_transcript(topology_from_graph(generators.ring(6), rounds=2, accelerated=False))
    shared = linear_model(transcript)
    explicit = LinearGaussianModel(n=6, inputs=shared.inputs, received=shared.received, noise=shared.inputs.copy(),
                                   noise_owner=tuple(range(6)), noise_scale=np.ones(6))
    assert explicit.shared
    geometry = view_geometry(explicit)
    assert geometry.method == "float-interval"
    assert np.allclose(geometry.lower, view_geometry(shared, method="float").lower, rtol=0, atol=1e-12, equal_nan=True)


def test_the_attack_reads_a_general_model() -> None:
    """Two independent looks at x_0 (p = 2): at σ = Δ the exact ε is large; the attack finds part of it."""
    model = one_observer([[1, 0], [1, 0]], [[1, 0], [0, 1]], (0, 0), [1.0, 1.0])
    strong = attack_pair(model, 0, 1, sigma=0.5, sensitivity=1.0, delta=1e-5, runs=20_000, rng_seed=0)
    blind = attack_pair(one_observer([[0, 1]], [[1, 1]], (0, 1), [1.0, 1.0]), 0, 1, sigma=0.5, sensitivity=1.0,
                        delta=1e-5, runs=20_000, rng_seed=0)
    assert strong.eps_lower > 2.0 and blind.eps_lower == 0.0


def test_a_model_refuses_inconsistent_shapes() -> None:
    with pytest.raises(ValueError, match="input columns"):
        LinearGaussianModel(n=3, inputs=np.zeros((1, 2)), received=((), (), ()))
    with pytest.raises(ValueError, match="does not hold"):
        LinearGaussianModel(n=2, inputs=np.zeros((1, 2)), received=((), (1,)))
    with pytest.raises(ValueError, match="owners and scales"):
        LinearGaussianModel(n=2, inputs=np.zeros((1, 2)), received=((), (0,)), noise=np.zeros((1, 3)),
                            noise_owner=(0, 1), noise_scale=np.ones(2))
