"""`netdp demo` (synchronous Muffliato): a private regime in which the network amplifies privacy.

The demo's own topology (σ calibrated by the planner) and data, run in process with a seeded
sampler (the real processes are `tests/cluster/test_demo_cluster.py`'s), audited as the demo
audits it: the mean exact ε meets the target, only the neighbours' pairs are reconstructed
(T·deg = 28 values against n − 1 = 127 unknown inputs), exact ≤ LDP, and the estimates' MSE is
within Muffliato Thm 2's bound. Then the flags: --sigma wins over the calibration, a tighter
--target-eps buys more noise, and flags of another protocol are refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import SIGMA_RTOL, summarize
from coordinator_tools.audit.run_audit import audit_run
from coordinator_tools.cli import build_parser
from coordinator_tools.cluster.command import CONSOLE
from coordinator_tools.cluster.demo import demo_topology, resolve_defaults
from coordinator_tools.cluster.demo_protocols import AveragingDemo, MuffliatoDemo
from coordinator_tools.cluster.launch import LaunchOptions
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.theory import muffliato_mse_bound
from node.errors import ConfigError
from node.topology import save_topology

SEED = 21  # the simulation sampler's master seed
DATA_SEED = 4


def demo_args(*flags: str) -> argparse.Namespace:
    """`netdp demo FLAGS` as the command resolves it before making the topology."""
    args = build_parser().parse_args(["demo", *flags])
    resolve_defaults(args)
    return args


def test_the_default_demo_is_private_and_amplified_within_thm2(tmp_path: Path) -> None:
    args = demo_args("--data-seed", str(DATA_SEED))
    demo = MuffliatoDemo()
    topology = demo_topology(args, demo)
    n, params = topology.n, topology.protocol
    assert (n, params.rounds, params.accelerated, params.dimension) == (128, 4, True, 32)
    assert len({node.address for node in topology.nodes}) == 8  # 16 ids per process
    assert 0.8 < params.sigma < 0.83  # calibrated: 0.814 for mean eps 2 (local DP would need 1.98)
    save_topology(topology, tmp_path / "topology.json")
    demo.write_data(topology, tmp_path / "data", args)
    result = run_virtual(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=SEED))
    assert result.ok
    report = audit_run(result.rundir, tmp_path / "audit", demo.audit_options(tmp_path / "data"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]

    pairs = read_pairs(tmp_path / "audit")
    eps, ldp = pairs["exact_eps_upper"], pairs["ldp_eps"]
    target = AveragingDemo.target_eps
    rule = summarize(pair_matrix(pairs, "exact_eps_upper", n), "mean")
    assert target * (1 - 1e-3) <= rule <= target * (1 + SIGMA_RTOL)
    assert np.all(eps <= ldp * (1 + 1e-9)) and ldp[0] > 5.5  # local DP at this sigma: 5.56
    rebuilt = pairs["exact_reconstructable"]
    assert rebuilt.sum() == n * 7 and np.all(rebuilt == (pairs["hop_distance"] == 1))  # the neighbours only
    assert eps[pairs["hop_distance"] >= 2].max() < 0.55 * ldp[0]

    mse = report["utility"]["mse"]
    assert 0.002 < mse < muffliato_mse_bound(n, params.sigma)

    with CONSOLE.capture() as printed:
        demo.print_privacy(topology, tmp_path / "audit", report)
    text = " ".join(printed.get().split())
    assert "Where it does not help: 896 of 16256 pairs are reconstructed (hop 1) and sit at local DP; where it " \
           "helps: the other pairs are at 0.33 of it on average." in text


def test_sigma_given_wins_over_the_calibration_and_a_tighter_target_buys_more_noise() -> None:
    assert demo_topology(demo_args("--sigma", "0.3", "--target-eps", "1"), MuffliatoDemo()).protocol.sigma == 0.3
    loose = demo_topology(demo_args("--n", "16", "--target-eps", "3"), MuffliatoDemo()).protocol.sigma
    tight = demo_topology(demo_args("--n", "16", "--target-eps", "1"), MuffliatoDemo()).protocol.sigma
    assert 0 < loose < tight


@pytest.mark.parametrize(("flags", "message"), [
    (["--protocol", "muffliato-async", "--rounds", "3"], "--rounds does not apply to the muffliato-async demo"),
    (["--protocol", "muffliato-gd", "--target-eps", "2"], "--target-eps does not apply to the muffliato-gd demo"),
    (["--target-eps", "0"], "--target-eps must be greater than 0"),
    (["--rounds", "0"], "--rounds must be greater than 0"),
])
def test_the_demo_refuses_flags_it_cannot_honour(flags: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        demo_args(*flags)
