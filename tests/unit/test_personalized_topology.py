"""Publishing personalized CD: its topology options, per-agent budgets, and what a topology refuses."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from pydantic import ValidationError

from coordinator_tools.cli import main
from coordinator_tools.topology.build import build_topology
from node.budget import equal_split
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import load_topology

BASE = {"dimension": 3, "mu": 1.0, "max_examples": 100, "updates": 4}


def test_topology_generate_publishes_the_protocol_and_refuses_a_gaussian_option(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    argv = ["topology", "generate", "ring", "--n", "6", "--protocol", "personalized-cd", "--dimension", "3",
            "--mu", "0.5", "--max-examples", "80", "--updates", "4", "--epsilon", "2", "--delta", "0.001"]
    assert main([*argv, "--out", str(tmp_path / "t.json")]) == 0
    params = load_topology(tmp_path / "t.json").protocol
    assert (params.name, params.mu, params.max_examples, params.epsilon, params.delta) == (
        "personalized-cd", 0.5, 80, 2.0, 0.001)
    assert main([*argv, "--sigma", "1", "--out", str(tmp_path / "u.json")]) == 2
    assert "--sigma is not an option of protocol personalized-cd" in capsys.readouterr().err


def test_an_agent_with_its_own_budget_splits_it_and_the_others_split_the_default() -> None:
    params = PersonalizedCDParams(**BASE, epsilon=2.0, delta=1e-3, budgets=[{"node": 2, "epsilon": 0.5}])
    assert params.budget_of(2) == (0.5, 0.0) and params.budget_of(0) == (2.0, 1e-3)
    assert params.release_epsilons(2, 6) == pytest.approx((0.125,) * 4)
    assert params.step_epsilon(0, 3, 6) == equal_split(2.0, 1e-3, 4)
    assert params.sigma == 1.0 and PersonalizedCDParams(**BASE).sigma == 0.0  # non-private CD: no noise at all
    assert PersonalizedCDParams(**BASE).budget_of(0) is None


@pytest.mark.parametrize(("fields", "message"), [
    ({"budgets": [{"node": 1, "epsilon": 1.0}]}, "per-agent budgets need a private run"),
    ({"epsilon": 1.0, "budgets": [{"node": 1, "epsilon": 1.0}, {"node": 1, "epsilon": 2.0}]}, "listed twice"),
])
def test_inconsistent_budgets_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PersonalizedCDParams(**BASE, **fields)


def test_a_topology_refuses_a_budget_for_an_agent_it_does_not_have() -> None:
    params = PersonalizedCDParams(**BASE, epsilon=1.0, budgets=[{"node": 9, "epsilon": 1.0}])
    with pytest.raises(ValueError, match="budgets name node 9, which does not exist"):
        build_topology(nx.cycle_graph(6), graph_name="ring", run_id="r", protocol=params)


def test_topology_generate_publishes_the_budget_split_and_the_warm_start(tmp_path: Path) -> None:
    argv = ["topology", "generate", "ring", "--n", "6", "--protocol", "personalized-cd", "--dimension", "3",
            "--mu", "0.5", "--max-examples", "80", "--updates", "4", "--epsilon", "2", "--budget-split",
            "proposition2", "--curvature-ratio", "0.3", "--warm-start-epsilon", "0.1",
            "--out", str(tmp_path / "t.json")]
    assert main(argv) == 0
    params = load_topology(tmp_path / "t.json").protocol
    assert (params.budget_split, params.curvature_ratio, params.warm_start_epsilon, params.releases) == (
        "proposition2", 0.3, 0.1, 5)
