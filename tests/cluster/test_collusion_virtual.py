"""`netdp audit --colluders` and `netdp plan --colluders` end to end on a small in-process virtual run."""

from __future__ import annotations

import json

from coordinator_tools.cli import main


def test_a_virtual_run_audits_and_plans_a_coalition(make_cluster_files, tmp_path, capsys):
    files = make_cluster_files("hypercube", 8, sigma=0.5, rounds=3, dimension=2, name="collusion")
    rundir = files.root / "run"
    assert main(["run", str(files.topology_path), "--data", str(files.data_dir), "--out", str(rundir), "--virtual",
                 "--sampler", "simulation", "--sim-seed", "5"]) == 0
    assert main(["audit", str(rundir), "--out", str(tmp_path / "audit"), "--colluders", "3,5",
                 "--attack-pairs", "none"]) == 0
    assert "Nodes 3,5 colluded" in " ".join(capsys.readouterr().out.split())
    report = json.loads((tmp_path / "audit" / "report.json").read_text())
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    block = report["collusion"]
    assert block["colluders"] == [3, 5] and len(block["losses"]) == 6
    assert all(row["model_attack_eps_lower"] is None for row in block["losses"])
    assert main(["plan", str(files.topology_path), "--out", str(tmp_path / "plan.json"), "--colluders", "3,5"]) == 0
    planned = json.loads((tmp_path / "plan.json").read_text())["collusion"]
    assert [row["exact_eps_upper"] for row in planned["losses"]] == [row["exact_eps_upper"] for row in block["losses"]]
