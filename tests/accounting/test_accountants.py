"""`account`: the columns together, on the spec's hand example, drop-outs, and more noise."""

from __future__ import annotations

import math
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.exact import RATIONAL_MAX_NODES
from coordinator_tools.audit.protocols.muffliato.accountant import account
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.topology import generators
from tests.accounting.reference import drop, topology_from_graph

ALPHA, SIGMA, DELTA = 3.0, 2.0, 1e-5
LDP_RDP = ALPHA / (2 * SIGMA**2)  # αΔ²/(2σ²) with Δ = 1


def path_transcript(rounds: int):
    return planned_transcript(topology_from_graph(nx.path_graph(4), rounds=rounds, accelerated=False))


def test_spec_example_exact_is_local_dp_while_the_paper_sum_is_one_eighth_of_it():
    losses = account(path_transcript(4), sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA)
    assert losses.exact_method == "rational"
    assert losses.ldp_rdp == LDP_RDP
    assert losses.exact_rdp[0, 3] == LDP_RDP and losses.exact_rdp_upper[0, 3] == LDP_RDP
    assert losses.reconstructable[0, 3] and not losses.ill_conditioned.any()
    assert losses.exact_eps[0, 3] == losses.ldp_eps == gaussian_epsilon(1 / SIGMA, DELTA)
    ratio = Fraction(565, 4531)  # 1/23 + 16/197, about 1/8
    assert losses.paper_rdp[0, 3] == pytest.approx(LDP_RDP * float(ratio), rel=1e-14)
    assert losses.central_rdp == pytest.approx(LDP_RDP / 4, rel=1e-15)


def test_paper_conversion_switch_is_the_classic_formula():
    losses = account(path_transcript(4), sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA, conversion="paper")
    off = ~np.eye(4, dtype=bool)
    assert np.allclose(losses.paper_eps[off], losses.paper_rdp[off] + math.log(1 / DELTA) / (ALPHA - 1), rtol=1e-15)
    tight = account(path_transcript(4), sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA)
    assert (tight.paper_eps[off] < losses.paper_eps[off]).all()
    assert np.array_equal(tight.exact_eps, losses.exact_eps, equal_nan=True)


def test_a_drop_out_changes_the_numbers_as_recomputed_by_hand():
    """Node 2 misses x_1^1 (T = 3): x_0 no longer reaches node 3; the paper sum for 1 -> 3 drops to 1/3 + 4/29."""
    planned = account(path_transcript(3), sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA)
    realized = account(drop(path_transcript(3), 2, 1, 1), sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA)
    assert planned.exact_rdp[0, 3] == LDP_RDP and realized.exact_rdp[0, 3] == 0.0
    assert realized.exact_eps[0, 3] == 0.0 and realized.paper_rdp[0, 3] == 0.0
    assert planned.paper_rdp[1, 3] == pytest.approx(LDP_RDP * float(Fraction(1, 3) + Fraction(4, 23)), rel=1e-14)
    assert realized.paper_rdp[1, 3] == pytest.approx(LDP_RDP * float(Fraction(1, 3) + Fraction(4, 29)), rel=1e-14)
    # node 0 hears only node 1, whose values did not change, so its column stays; node 1 hears the new x_2^2
    assert np.array_equal(planned.paper_rdp[:, 0], realized.paper_rdp[:, 0], equal_nan=True)
    assert planned.paper_rdp[3, 1] != realized.paper_rdp[3, 1]


@pytest.mark.parametrize("method", ["rational", "float"])
def test_losses_never_grow_with_sigma(method):
    transcript = planned_transcript(topology_from_graph(generators.erdos_renyi(20, seed=8), rounds=4, accelerated=True))
    columns = ("paper_rdp", "paper_eps", "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper")
    previous = None
    for sigma in (0.0, 0.3, 1.0, 3.0):
        losses = account(transcript, sigma=sigma, sensitivity=1.0, alpha=ALPHA, delta=DELTA, exact_method=method)
        off = ~np.eye(transcript.n, dtype=bool)
        assert (losses.exact_rdp_upper[off] <= losses.ldp_rdp * (1 + 1e-12)).all()
        if previous is not None:
            for name in columns:
                assert (getattr(losses, name)[off] <= getattr(previous, name)[off]).all(), name
            assert losses.ldp_eps < previous.ldp_eps and losses.central_eps < previous.central_eps
        previous = losses


def test_rational_arithmetic_is_the_default_up_to_the_threshold():
    small = planned_transcript(topology_from_graph(generators.ring(RATIONAL_MAX_NODES), rounds=2, accelerated=True))
    large = planned_transcript(topology_from_graph(generators.ring(RATIONAL_MAX_NODES + 1), rounds=2, accelerated=True))
    assert account(small, sigma=1.0, sensitivity=1.0, alpha=2.0, delta=DELTA).exact_method == "rational"
    assert account(large, sigma=1.0, sensitivity=1.0, alpha=2.0, delta=DELTA).exact_method == "float-interval"
