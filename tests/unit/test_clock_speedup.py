"""Fault injection of a clock that ticks faster than published: `netdp-node --fault-clock-speedup FACTOR`.

The launcher passes the flag to the processes of the nodes it names (`LaunchOptions.clock_speedup`),
refuses a node the topology lacks or a factor that is not a finite positive number, and a virtual
run refuses it (no node processes). Its effect on a real agent is in tests/cluster/test_personalized_cluster.py.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from coordinator_tools.cluster.launch import LaunchOptions, check_launch_inputs, node_command
from coordinator_tools.cluster.virtual import refuse_process_options
from coordinator_tools.topology.build import build_topology
from node.cli import build_parser
from node.cli import main as node_main
from node.errors import ConfigError
from node.protocols.muffliato import MuffliatoParams

TOPOLOGY = build_topology(nx.cycle_graph(3), graph_name="ring", run_id="clock", protocol=MuffliatoParams(
    sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=1, dimension=2))
ARGS = ["--topology", "t.json", "--id", "1", "--data", "d.json", "--log-dir", "l", "--insecure"]


def test_the_flag_reaches_only_the_nodes_whose_clock_is_faster(tmp_path: Path) -> None:
    options = LaunchOptions(clock_speedup={1: 10.0})
    fast, plain = (node_command(tmp_path, v, tmp_path / "data.json", options) for v in (1, 0))
    assert fast[fast.index("--fault-clock-speedup") + 1] == "10.0" and "--fault-clock-speedup" not in plain
    assert build_parser().parse_args([*ARGS, "--fault-clock-speedup", "10"]).fault_clock_speedup == 10.0
    assert build_parser().parse_args(ARGS).fault_clock_speedup == 1.0


@pytest.mark.parametrize("factor", ["0", "-2", "inf", "nan"])
def test_netdp_node_refuses_a_factor_that_is_not_finite_and_positive(factor: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert node_main([*ARGS, "--fault-clock-speedup", factor]) == 2
    assert "--fault-clock-speedup takes a finite factor > 0" in capsys.readouterr().err


@pytest.mark.parametrize(("speedup", "message"), [({7: 2.0}, "the clock speedup is set for node 7"),
                                                  ({1: 0.0}, "the clock speedup of node 1 is 0.0, not a finite")])
def test_the_launcher_refuses_a_speedup_it_cannot_apply(tmp_path: Path, speedup: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_launch_inputs(TOPOLOGY, tmp_path, LaunchOptions(clock_speedup=speedup))
    with pytest.raises(ConfigError, match=r"drop faster clocks \(--fault-clock-speedup\)"):
        refuse_process_options(LaunchOptions(clock_speedup=speedup))
