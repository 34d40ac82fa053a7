"""The worst case over per-step directions: the certified interval against closed forms and brute force.

Every reference value here is computed without the module: closed forms (X = I − 11ᵀ/3, the
5-cycle's Laplacian), enumeration of sign vectors, and a search over the angles of the steps'
directions (a grid, then a local optimiser from its best points), parametrised so that every
configuration of unit vectors in R^D is reached up to a rotation.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from coordinator_tools.audit.directions import direction_interval, relaxation_rank

RTOL = 1e-9


def value(block: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Σ_st X_st ⟨δ_s, δ_t⟩ for directions (…, T, D)."""
    return np.einsum("st,...sd,...td->...", block, directions, directions)


def planar(angles: np.ndarray) -> np.ndarray:
    """Unit vectors of R² at angles (…, T − 1): δ_0 = e_1 (a rotation fixes it), δ_s at angle θ_s."""
    theta = np.concatenate([np.zeros((*angles.shape[:-1], 1)), angles], axis=-1)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def spatial(angles: np.ndarray) -> np.ndarray:
    """Unit vectors of R³ from angles (…, 2T − 3): δ_0 = e_1, δ_1 in the (e_1, e_2) plane at angle a, every
    later one at (polar, azimuth) about e_1."""
    a, rest = angles[..., :1], angles[..., 1:].reshape(*angles.shape[:-1], -1, 2)
    first = np.broadcast_to([1.0, 0.0, 0.0], (*angles.shape[:-1], 1, 3))
    second = np.stack([np.cos(a), np.sin(a), np.zeros_like(a)], axis=-1)
    polar, azimuth = rest[..., 0], rest[..., 1]
    later = np.stack([np.cos(polar), np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth)], axis=-1)
    return np.concatenate([first, second, later], axis=-2)


def brute_force(block: np.ndarray, unit_vectors, angles: int, grid: int, rng: np.random.Generator) -> float:
    """max over a grid of every angle, then Nelder–Mead from the 5 best grid points and 5 random ones."""
    axes = np.meshgrid(*[np.linspace(0.0, 2 * np.pi, grid, endpoint=False)] * angles, indexing="ij")
    points = np.stack([axis.ravel() for axis in axes], axis=1)
    values = value(block, unit_vectors(points))
    starts = [*points[np.argsort(values)[-5:]], *rng.uniform(0, 2 * np.pi, size=(5, angles))]
    best = float(values.max())
    for start in starts:
        found = minimize(lambda x: -value(block, unit_vectors(x)), start, method="Nelder-Mead",
                         options={"xatol": 1e-12, "fatol": 1e-14, "maxiter": 20_000})
        best = max(best, -float(found.fun))
    return best


def random_psd(rng: np.random.Generator, steps: int, rank: int) -> np.ndarray:
    """A PSD block of the given rank with entries of both signs (directions then matter)."""
    factor = rng.normal(size=(steps, rank))
    return factor @ factor.T / rank


def test_centred_block_by_hand() -> None:
    """X = I − 11ᵀ/3: Σ_st X_st⟨δ_s, δ_t⟩ = Σ‖δ_s‖² − ‖Σ_s δ_s‖²/3 ≤ 3, reached when three unit vectors
    sum to zero (120° apart: not on a line); on a line the best is two against one, 3 − 1/3."""
    centred = (np.eye(3) - 1 / 3)[None]
    scalar = direction_interval(centred, centred, 1)
    assert scalar.lower[0] == pytest.approx(8 / 3, rel=RTOL) and scalar.upper[0] == pytest.approx(8 / 3, rel=RTOL)
    for dimension in (2, 3, 50):
        vector = direction_interval(centred, centred, dimension)
        assert vector.lower[0] == pytest.approx(3.0, rel=RTOL) and vector.upper[0] == pytest.approx(3.0, rel=RTOL)
        assert vector.upper[0] >= 3.0  # a proof never rounds below the value


def test_the_five_cycle_needs_the_plane() -> None:
    """X = the 5-cycle's Laplacian: Σ over its edges of ‖δ_s − δ_t‖². On a line the best is a maximum
    cut, 4 edges of 4 = 16; in the plane, consecutive steps 4π/5 apart give 5 (2 + 2 cos(π/5)), the
    relaxation's optimum (its rank is at most 2 for T = 5)."""
    laplacian = 2 * np.eye(5) - np.roll(np.eye(5), 1, axis=1) - np.roll(np.eye(5), -1, axis=1)
    block = laplacian[None]
    scalar = direction_interval(block, block, 1)
    assert scalar.lower[0] == pytest.approx(16.0, rel=RTOL) and scalar.upper[0] == pytest.approx(16.0, rel=RTOL)
    planar_optimum = 5 * (2 + 2 * np.cos(np.pi / 5))
    assert value(laplacian, planar(4 * np.pi / 5 * np.arange(1, 5))) == pytest.approx(planar_optimum)
    for dimension in (2, 3):
        vector = direction_interval(block, block, dimension)
        assert vector.lower[0] == pytest.approx(planar_optimum, rel=RTOL)
        assert vector.upper[0] == pytest.approx(planar_optimum, rel=RTOL) and vector.upper[0] >= planar_optimum


def test_scalar_gradients_are_the_best_sign_vector() -> None:
    """D = 1 over T ≤ 12 steps: both ends are the maximum over every sign vector, enumerated here."""
    rng = np.random.default_rng(11)
    for steps in (2, 4, 7):
        blocks = np.stack([random_psd(rng, steps, rank) for rank in (1, 2, steps)])
        interval = direction_interval(blocks, blocks, 1)
        signs = np.array(list(itertools.product((-1.0, 1.0), repeat=steps)))
        best = np.einsum("cs,pst,ct->pc", signs, blocks, signs).max(axis=1)
        np.testing.assert_allclose(interval.lower, best, rtol=RTOL)
        np.testing.assert_allclose(interval.upper, best, rtol=RTOL)
        assert np.all(interval.upper >= best)


@pytest.mark.parametrize("dimension, steps, angles, grid", [(2, 3, 2, 120), (3, 3, 3, 36), (3, 4, 5, 10)])
def test_brute_force_over_the_directions_lies_in_the_interval(dimension: int, steps: int, angles: int,
                                                              grid: int) -> None:
    """D = 2 and D = 3: the best directions found by a search over their angles are inside [lower, upper], and
    the interval is that value (for T ≤ 5 the relaxation has an optimum of rank 2, which D ≥ 2 reaches)."""
    rng = np.random.default_rng(dimension * 10 + steps)
    unit_vectors = planar if dimension == 2 else spatial
    blocks = np.stack([random_psd(rng, steps, rank) for rank in (1, 2, steps, steps)])
    interval = direction_interval(blocks, blocks, dimension)
    for block, lower, upper in zip(blocks, interval.lower, interval.upper):
        searched = brute_force(block, unit_vectors, angles, grid, rng)
        assert lower <= searched * (1 + 1e-7) and searched <= upper
        assert lower == pytest.approx(searched, rel=1e-7) and upper == pytest.approx(searched, rel=1e-7)


def test_no_random_directions_exceed_the_upper_end() -> None:
    """Random PSD blocks, 4000 random unit directions each in R^D: never above the upper end; the lower end is
    never above the upper end, and for D at the relaxation's rank they meet."""
    rng = np.random.default_rng(5)
    for steps in (2, 3, 5, 8):
        blocks = np.stack([random_psd(rng, steps, rank) for rank in (1, 2, 3, steps) for _ in range(3)])
        for dimension in (1, 2, 3, relaxation_rank(steps)):
            interval = direction_interval(blocks, blocks, dimension)
            assert np.all(interval.lower <= interval.upper)
            directions = rng.normal(size=(4000, steps, dimension))
            directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
            sampled = np.einsum("pst,ksd,ktd->pk", blocks, directions, directions).max(axis=1)
            assert np.all(sampled <= interval.upper)
            if dimension >= relaxation_rank(steps):
                np.testing.assert_allclose(interval.lower, interval.upper, rtol=1e-9)


def test_nonnegative_blocks_close_on_the_aligned_value() -> None:
    """X ≥ 0 entrywise: every step in one direction reaches Σ_ij X_ij, and nothing does better, in any dimension;
    zero-padded steps (a source with fewer steps) change nothing."""
    rng = np.random.default_rng(3)
    blocks = np.abs(np.stack([random_psd(rng, 4, 4) for _ in range(5)]))
    blocks = blocks @ blocks.transpose(0, 2, 1)  # PSD and ≥ 0
    padded = np.pad(blocks, ((0, 0), (0, 2), (0, 2)))
    for dimension in (1, 5):
        for stack in (blocks, padded):
            interval = direction_interval(stack, stack, dimension)
            np.testing.assert_allclose(interval.lower, blocks.sum(axis=(1, 2)), rtol=RTOL)
            np.testing.assert_allclose(interval.upper, blocks.sum(axis=(1, 2)), rtol=RTOL)
            assert np.all(interval.signs[:, :4] == interval.signs[:, :1])


def test_the_lower_end_reads_the_standard_blocks_and_the_upper_the_fine_ones() -> None:
    """Two cut-offs of one block: the lower end is a value of the smaller, the upper a bound on the larger."""
    centred = np.eye(3) - 1 / 3
    interval = direction_interval((0.9 * centred)[None], centred[None], 2)
    assert interval.lower[0] == pytest.approx(2.7, rel=RTOL) and interval.upper[0] == pytest.approx(3.0, rel=RTOL)


def test_a_padded_block_whose_slack_rounds_to_singular_stops_alone() -> None:
    # A walk observer's block from a full-scale icml2024-fig1 calibration (random geometric graph, n = 16): two
    # pairs of identical steps, rounding noise between them, padded with 47 steps that do not exist. Near the
    # barrier's end its Z = Diag(y) − X passes Cholesky but an LU pivot rounds to 0.
    rounding = -float.fromhex("0x1.2bfd3e10e22fep-53")
    block = np.zeros((51, 51))
    block[:2, :2], block[2:4, 2:4] = 1 / 17, 1 / 31
    block[:2, 2:4] = block[2:4, :2] = rounding
    settled = np.diag([0.5, 0.25, 0.0])[None].repeat(2, axis=0)  # blocks settled by the cheap bounds, beside it
    stack = np.zeros((3, 51, 51))
    stack[0], stack[1, :3, :3], stack[2, :3, :3] = block, settled[0], np.ones((3, 3)) - 4 * np.eye(3)
    interval = direction_interval(stack, stack, 3)
    value = 4 / 17 + 4 / 31  # each identical pair aligned, the pairs orthogonal
    assert interval.lower[0] <= value * (1 + 1e-9) and interval.upper[0] >= value * (1 - 1e-9)
    assert interval.upper[0] - interval.lower[0] <= 1e-9 * value
    assert interval.upper[1] == pytest.approx(0.75)
