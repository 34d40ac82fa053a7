"""`netdp demo` end to end on real processes: 128 node ids as 8 `netdp-node --nodes` processes over mutual TLS.

Seeded (simulation sampler, data seed) so that the numbers are the unit test's regime on real
processes: σ calibrated for mean exact ε 2 at δ = 1e-5, only the 896 neighbour pairs
reconstructed, exact ≤ LDP, the MSE within Muffliato Thm 2's bound, every check passing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import SIGMA_RTOL, summarize
from coordinator_tools.cli import main
from coordinator_tools.cluster.demo_protocols import AveragingDemo
from coordinator_tools.cluster.launch import STDERR_FILE

pytestmark = pytest.mark.cluster


def test_the_default_demo_runs_128_ids_in_8_processes_and_shows_amplification(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--sampler", "simulation", "--seed", "8", "--data-seed", "4"]) == 0
    printed = " ".join(capsys.readouterr().err.split())
    assert "calibrated by the planner for mean exact eps 2 at delta 1e-05" in printed
    assert "running 128 nodes as 8 node processes on loopback (mutual TLS, simulation sampler)" in printed
    assert len(list((out / "run").glob(f"node-*/{STDERR_FILE}"))) == 8  # one process per 16 ids
    assert (out / "certs").is_dir()

    report = json.loads((out / "audit" / "report.json").read_text())
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    pairs = read_pairs(out / "audit")
    rule = summarize(pair_matrix(pairs, "exact_eps_upper", 128), "mean")
    assert AveragingDemo.target_eps * (1 - 1e-3) <= rule <= AveragingDemo.target_eps * (1 + SIGMA_RTOL)
    assert np.all(pairs["exact_eps_upper"] <= pairs["ldp_eps"] * (1 + 1e-9))
    assert pairs["exact_reconstructable"].sum() == 896 < 0.1 * len(pairs["source"])
    assert 0 < report["utility"]["mse"] < report["utility"]["bound"]
    assert "896 of 16256 pairs are reconstructed (hop 1) and sit at local DP" in printed
