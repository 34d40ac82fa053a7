"""`netdp demo --protocol decor`: --rounds sets its rounds like synchronous Muffliato's, and its closing lines say
where correlated noise wins only when the run's MSE shows it."""

from __future__ import annotations

import pytest

from coordinator_tools.cluster.demo import demo_topology
from coordinator_tools.cluster.demo_protocols import DecorDemo, closing_lines
from coordinator_tools.compare.designs import averaging_decor
from coordinator_tools.topology.generators import generate
from node.errors import ConfigError
from node.protocols.decor import DecorParams
from tests.unit.test_demo_averaging import demo_args

MEANS = {"curious-observer": 2.0, "eavesdropper": 0.5}


def test_rounds_set_the_decor_demo_s_rounds_and_leave_its_one_noisy_round() -> None:
    params = demo_topology(demo_args("--protocol", "decor", "--sigma", "1", "--rounds", "5"), DecorDemo()).protocol
    assert isinstance(params, DecorParams) and (params.rounds, params.noisy_rounds) == (5, 1)
    default = demo_topology(demo_args("--protocol", "decor", "--sigma", "1"), DecorDemo()).protocol
    assert isinstance(default, DecorParams)
    assert default.rounds == averaging_decor(generate("hypercube", n=16), sigma=1.0, alpha=2.0, dimension=1).rounds > 5


def test_the_decor_demo_refuses_zero_rounds() -> None:
    with pytest.raises(ConfigError, match="--rounds must be greater than 0"):
        demo_args("--protocol", "decor", "--rounds", "0")


def test_the_closing_lines_claim_a_win_only_below_local_dp() -> None:
    won = closing_lines(0.02, central=0.01, local=0.1, means=MEANS, coalition=5.0, ldp=5.5, rounds=9)
    assert won.startswith("Where correlated noise wins: MSE 0.02 per coordinate, 2.00x central DP's 0.01 and 0.2x "
                          "local DP's 0.1 at the same mean eps 2 against a curious node")
    assert "Where it stops winning: node 0's neighbours together hold every secret on its edges" in won
    lost = closing_lines(0.3, central=0.01, local=0.1, means=MEANS, coalition=5.0, ldp=5.5, rounds=2)
    assert lost.startswith("Correlated noise does not win in this run: after T = 2 rounds the pairwise terms have "
                           "not mixed out, MSE 0.3 per coordinate is 3x local DP's 0.1")
    assert "wins" not in lost and "Under collusion: node 0's neighbours" in lost
