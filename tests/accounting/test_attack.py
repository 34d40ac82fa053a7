"""The distinguishing attack: a valid lower bound that finds real leakage and nothing else."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.attack import attack_pair, attack_pairs, clopper_pearson, resolution_limit
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.protocols.muffliato.accountant import account, linear_model
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.topology import generators
from tests.accounting.reference import drop, topology_from_graph


def path_transcript(rounds: int):
    return planned_transcript(topology_from_graph(nx.path_graph(4), rounds=rounds, accelerated=False))


def path_model(rounds: int):
    return linear_model(path_transcript(rounds))


def test_clopper_pearson_by_hand():
    lower, upper = clopper_pearson(np.array([0, 10]), 10)
    assert lower[0] == 0.0 and upper[0] == pytest.approx(1 - 0.025**0.1, rel=1e-12)
    assert lower[1] == pytest.approx(0.025**0.1, rel=1e-12) and upper[1] == 1.0


@pytest.mark.parametrize(
    ("graph", "rounds", "sigma"),
    [
        (nx.path_graph(4), 3, 1.0),
        (generators.ring(8), 3, 0.7),
        (generators.star(6), 2, 2.0),
        (generators.erdos_renyi(12, seed=1), 2, 1.0),
    ],
)
def test_attack_never_beats_the_exact_loss(graph, rounds, sigma):
    transcript = planned_transcript(topology_from_graph(graph, rounds=rounds, accelerated=True))
    losses = account(transcript, sigma=sigma, sensitivity=1.0, alpha=2.0, delta=1e-5,
                     attack_pairs="all", attack_runs=4000, rng_seed=3)
    attacked = ~np.isnan(losses.model_attack_eps_lower)
    assert attacked.sum() == transcript.n * (transcript.n - 1)
    assert (losses.model_attack_eps_lower[attacked] <= losses.exact_eps_upper[attacked]).all()
    assert (losses.exact_eps_upper[attacked] <= losses.ldp_eps * (1 + 1e-12)).all()


def test_attack_finds_a_reconstructable_pair_and_nothing_in_an_unseen_one():
    """Path with node 2 missing x_1^1 (T = 3): node 3 reconstructs x_1 but never sees x_0."""
    model = linear_model(drop(path_transcript(3), 2, 1, 1))
    seen = attack_pair(model, 1, 3, sigma=0.5, sensitivity=1.0, delta=1e-5, runs=20_000, rng_seed=0)
    unseen = attack_pair(model, 0, 3, sigma=0.5, sensitivity=1.0, delta=1e-5, runs=20_000, rng_seed=0)
    assert seen.eps_lower > 2.0  # exact: the local-DP value at μ = 2, about 5.9
    assert unseen.eps_lower == 0.0


def test_attack_without_noise_is_capped_by_the_number_of_runs():
    result = attack_pair(path_model(2), 2, 3, sigma=0.0, sensitivity=1.0, delta=1e-5, runs=2000, rng_seed=0)
    held_out = 1000
    tpr_lower = 0.025 ** (1 / held_out)
    assert result.eps_lower == pytest.approx(np.log((tpr_lower - 1e-5) / (1 - tpr_lower)), rel=1e-9)
    assert result.eps_lower == pytest.approx(resolution_limit(2000, 1e-5), rel=1e-12)  # the limit is reached


def test_pairs_attacked_together_hold_together_so_each_bound_is_lower():
    """Two noiseless pairs at once: each side's tail is 2.5%/2, the limit of two pairs, below one pair's."""
    together = attack_pairs(path_model(2), [(2, 3), (1, 3)], sigma=0.0, sensitivity=1.0, delta=1e-5, runs=2000,
                            rng_seed=0)
    tpr_lower = 0.0125 ** (1 / 1000)
    for result in together.values():
        assert result.eps_lower == pytest.approx(np.log((tpr_lower - 1e-5) / (1 - tpr_lower)), rel=1e-9)
        assert result.eps_lower == pytest.approx(resolution_limit(2000, 1e-5, 2), rel=1e-12)
    assert resolution_limit(2000, 1e-5, 2) < resolution_limit(2000, 1e-5)


def test_attack_is_reproducible_with_a_seed_and_checks_its_pairs():
    options = dict(sigma=1.0, sensitivity=1.0, delta=1e-5, runs=1000, rng_seed=42)
    first = attack_pairs(path_model(3), [(0, 3), (1, 3), (2, 0)], **options)
    second = attack_pairs(path_model(3), [(0, 3), (1, 3), (2, 0)], **options)
    assert first == second and set(first) == {(0, 3), (1, 3), (2, 0)}
    with pytest.raises(ValueError, match="not sources"):
        attack_pairs(path_model(3), [(3, 3)], **options)


def test_a_view_that_pins_an_input_down_is_attacked_along_the_direction_no_noise_reaches():
    """Observer 1 receives x_0 bare and x_0 + η_0: the score x_0 is 0 under H0, Δ under H1, at every replay.

    Every held-out replay is then classified right, so the bound is the most 1000 runs per side can show:
    ln((TPR_lower − δ)/FPR_upper) with TPR_lower = 0.025^(1/1000) (Clopper–Pearson, all right).
    """
    model = LinearGaussianModel(n=2, inputs=np.array([[1.0, 0.0], [1.0, 0.0]]), received=((), (0, 1)),
                                noise=np.array([[0.0], [1.0]]), noise_owner=(0,))
    result = attack_pair(model, 0, 1, sigma=1.0, sensitivity=1.0, delta=1e-5, runs=2000, rng_seed=0)
    tpr_lower = 0.025 ** (1 / 1000)
    assert result.eps_lower == pytest.approx(np.log((tpr_lower - 1e-5) / (1 - tpr_lower)), rel=1e-2)
