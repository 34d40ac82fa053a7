"""coordinator_tools.api: keyword arguments reach the generator or the protocol, and bad ones are refused early."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from coordinator_tools import api
from coordinator_tools.cli import build_parser
from node.errors import ConfigError


def test_topology_splits_generator_and_protocol_keywords() -> None:
    topo = api.topology("grid", rows=2, cols=3, protocol="muffliato", sigma=0.5, rounds=4, accelerated=False)
    assert topo.n == 6 and topo.graph == "grid"
    assert (topo.protocol.sigma, topo.protocol.rounds, topo.protocol.accelerated) == (0.5, 4, False)


def test_topology_records_a_fresh_seed_for_a_random_graph() -> None:
    assert api.topology("erdos_renyi", 12).graph_seed is not None


def test_topology_refuses_a_field_its_protocol_does_not_have() -> None:
    with pytest.raises(ValidationError):
        api.topology("ring", 4, exchanges=3)
    with pytest.raises(ConfigError, match="unknown protocol"):
        api.topology("ring", 4, protocol="no-such-protocol")


def test_a_networked_run_needs_certificates_or_insecure(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="certs_dir"):
        api.run(api.topology("ring", 4), tmp_path / "data", tmp_path / "run", virtual=False)


def test_a_sweep_reads_back_as_one_row_per_point_and_resumes(tmp_path: Path) -> None:
    table = api.sweep(tmp_path / "sweep", protocol=["muffliato"], graph=["ring"], n=[6], sigma=[1.0, 2.0],
                      rounds=[2])
    assert list(table["sigma"]) == [1.0, 2.0] and set(table["utility_metric"]) == {"mse"}
    assert table["mean_exact_eps"].iloc[0] > table["mean_exact_eps"].iloc[1] > 0  # more noise, less loss
    assert (table["mean_exact_eps"] <= table["ldp_eps"]).all() and table["checks_ok"].all()
    rows = sorted((tmp_path / "sweep" / "points").glob("*/row.json"))
    stamps = [path.stat().st_mtime_ns for path in rows]
    again = api.sweep(tmp_path / "sweep", protocol=["muffliato"], graph=["ring"], n=[6], sigma=[1.0, 2.0],
                      rounds=[2])
    assert again.equals(table) and [path.stat().st_mtime_ns for path in rows] == stamps  # nothing reran


def test_an_audit_run_with_a_broken_node_fails_its_audit_naming_the_node(tmp_path: Path) -> None:
    topo = api.topology("ring", 6, sigma=0.5, rounds=3, dimension=2)
    data = api.write_data(api.synthetic_data(topo, seed=0), tmp_path / "data")
    run = api.run(topo, data, tmp_path / "run", seed=1, canaries=200, breaks={2: "noise-scale=0"})
    assert run.estimates.shape[1] == 2  # the canary coordinates stay in the logs, out of the outputs
    audit = api.audit(run, attack_pairs="none")
    assert audit.report["canaries"]["canaries"] == 200
    (failed,) = [check for check in audit.report["checks"] if not check["ok"]]
    assert failed["name"].startswith("noise in the run's messages") and "node 2" in failed["detail"]
    assert audit.pairs["empirical_eps_lower"].notna().all()


def test_the_api_calls_library_functions_never_the_command_line() -> None:
    """api.py builds no argparse flags and captures no stdout: the commands are thin layers over the same functions."""
    tree = ast.parse(Path(api.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"argparse", "io", "coordinator_tools.cli"}
    assert not {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} & {
        "redirect_stdout", "parse_args"}


@pytest.mark.parametrize("module", ["coordinator_tools.api", "coordinator_tools.audit.run_audit",
                                    "coordinator_tools.audit.command", "coordinator_tools.audit.plan_command",
                                    "coordinator_tools.sweep.command", "coordinator_tools.sweep.point"])
def test_every_library_module_imports_first(module: str) -> None:
    """No import cycle between the API and the libraries it calls, whichever module a program imports first."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, timeout=120)


def test_a_plan_is_the_same_document_and_text_as_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    topo = api.topology("hypercube", 8, sigma=1.0)
    planned = api.plan(topo, tmp_path / "api" / "plan.json", plain=True, rounds=3, target_mean_eps=2.0,
                       colluders=[0, 1])
    api.save_topology(topo, tmp_path / "topology.json")
    (tmp_path / "cli").mkdir()
    args = build_parser().parse_args(["plan", str(tmp_path / "topology.json"), "--out",
                                      str(tmp_path / "cli" / "plan.json"), "--plain", "--rounds", "3",
                                      "--target-mean-eps", "2", "--colluders", "0,1"])
    assert args.handler(args) == (0 if planned.ok else 1)
    assert capsys.readouterr().out == planned.text.replace(str(tmp_path / "api"), str(tmp_path / "cli"))
    written = json.loads((tmp_path / "cli" / "plan.json").read_text(encoding="utf-8"))
    assert planned.report == json.loads((tmp_path / "api" / "plan.json").read_text(encoding="utf-8")) == written


@pytest.mark.parametrize("options", [{"sigma": -1.0}, {"alpha": 1.0}, {"rounds": 0}, {"delta": 2.0},
                                     {"plain": True, "accelerated": True},
                                     {"target_mean_eps": 1.0, "target_worst_eps": 1.0}])
def test_a_plan_refuses_options_the_command_line_refuses(tmp_path: Path, options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        api.plan(api.topology("ring", 4), tmp_path / "plan.json", **options)


def test_a_sweep_grid_comes_from_keywords_or_a_file_not_both(tmp_path: Path) -> None:
    (tmp_path / "grid.json").write_text(json.dumps({"protocol": "muffliato", "n": 6}))
    with pytest.raises(ConfigError, match="not both"):
        api.sweep(tmp_path / "sweep", grid=tmp_path / "grid.json", sigma=[1.0])
    with pytest.raises(ConfigError, match="api.sweep"):
        api.sweep(tmp_path / "sweep", protocol=["no-such-protocol"])
