"""A protocol that lives outside netdp: examples/plugin_protocol, installed, runs through every command.

The package is installed into a temporary folder (never into the test's environment, whose
registry stays netdp's own) and every command runs as a subprocess that sees it on PYTHONPATH:
`netdp topology generate --protocol noisy-gossip`, `netdp run` virtual and networked with mutual
TLS, `netdp audit` (its exact column checked against a case computed by hand), `netdp plan` and a
two-point `netdp sweep`, with no edit inside netdp. The package's learning task (a hinge-loss
linear SVM with a dataset of its own) is trained by muffliato-gd, virtual, and audited. Starts real
node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator_tools.cluster.ports import free_loopback_ports
from node.protocols.registry import ENTRY_POINT_GROUP, protocol_names
from node.tasks.registry import ENTRY_POINT_GROUP as TASK_GROUP
from node.tasks.registry import task_names

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "plugin_protocol"
NAME = "noisy-gossip"
TASK = "hinge"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a netdp that has the example package installed (in a folder of its own)."""
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(EXAMPLE)], check=True, capture_output=True)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def netdp(env: dict[str, str], cwd: Path, *argv: str) -> str:
    """Run one `netdp` command with the plug-in installed; its output, or the test fails with its last lines."""
    done = subprocess.run([str(BIN / "netdp"), *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)
    if done.returncode != 0:
        pytest.fail(f"netdp {' '.join(argv)} exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")
    return done.stdout + done.stderr


def exact_rdp(report: dict) -> dict[tuple[int, int], float]:
    return {(pair["source"], pair["observer"]): pair["exact"]["rdp"] for pair in report["pairs"]}


def failed_checks(report: dict) -> list[str]:
    return [check["name"] for check in report["checks"] if check["level"] == "fail"]


def entries(env: dict[str, str], group: str) -> dict[str, str]:
    """name -> value of every entry of an entry-point group, as a process with the plug-in installed sees them."""
    listing = subprocess.run(
        [sys.executable, "-c", "from importlib.metadata import entry_points; "
         f"print('\\n'.join(f'{{e.name}}={{e.value}}' for e in entry_points(group='{group}')))"],
        env=env, capture_output=True, text=True, check=True).stdout.split()
    return dict(line.split("=", 1) for line in listing)


def test_installing_the_package_adds_its_entry_point_beside_netdps_own(plugin_env: dict[str, str]) -> None:
    protocols = entries(plugin_env, ENTRY_POINT_GROUP)
    assert protocols[NAME] == "noisy_gossip_node:PLUGIN"
    assert set(protocol_names()) < set(protocols)  # every built-in, registered the same way
    assert NAME not in protocol_names()  # this process's netdp, without the package, does not know it
    tasks = entries(plugin_env, TASK_GROUP)
    assert tasks[TASK] == "hinge_task:PLUGIN"
    assert set(task_names()) == {"logistic", "least_squares", "recommendation"} < set(tasks)
    assert TASK not in task_names()


def test_a_two_node_run_is_audited_with_the_exact_loss_computed_by_hand(plugin_env: dict[str, str],
                                                                       tmp_path: Path) -> None:
    """Two nodes, W = [[1/2, 1/2], [1/2, 1/2]], T = 2, σ = Δ = 1, α = 2. Node 1 sees y_0^0 = x_0 + a and
    y_0^1 = x_0/2 + x_1/2 + c/2 + b (c its own draw, known to it): x_0 through gains 1 and 1/2 against
    independent N(0, 1) noise, so μ² = 1 + 1/4 and the exact RDP is α μ²/2 = 1.25, both ways."""
    netdp(plugin_env, tmp_path, "topology", "generate", "complete", "--n", "2", "--protocol", NAME,
          "--rounds", "2", "--sigma", "1", "--out", "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["protocol"] == {
        "name": NAME, "sigma": 1.0, "sensitivity": 1.0, "alpha": 2.0, "dimension": 1, "rounds": 2}
    netdp(plugin_env, tmp_path, "data", "generate", "t.json", "--out", "data")
    netdp(plugin_env, tmp_path, "run", "t.json", "--data", "data", "--out", "r", "--virtual")
    said = netdp(plugin_env, tmp_path, "audit", "r", "--out", "a", "--with-private-logs", "--data", "data")
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["protocol"] == NAME
    assert exact_rdp(report) == pytest.approx({(0, 1): 1.25, (1, 0): 1.25}, rel=1e-9)
    assert {check["name"]: check["level"] for check in report["checks"]}[
        "every logged value is its declared linear combination of inputs and draws"] == "pass"
    assert not failed_checks(report), said
    assert report["utility"]["mse"] is not None


WRONG_MODEL = """
import sys
from pathlib import Path

import numpy as np

from coordinator_tools.audit.plugin import LinearRows
from coordinator_tools.audit.replay import replay_run
from noisy_gossip_audit import AUDITOR, NoisyGossipAuditor

declared = NoisyGossipAuditor.message_rows


def without_noise(self, run, messages):  # a model that forgets the draws: it would under-state every loss
    rows = declared(self, run, messages)
    return LinearRows(rows.inputs, np.zeros_like(rows.noise), rows.draws)


NoisyGossipAuditor.message_rows = without_noise
(check,) = AUDITOR.checks(replay_run(Path(sys.argv[1]), with_private_logs=True))
print(check.name, check.ok, check.detail)
"""


def test_a_declared_model_that_is_not_what_the_nodes_computed_fails_the_audit(plugin_env: dict[str, str],
                                                                              tmp_path: Path) -> None:
    netdp(plugin_env, tmp_path, "topology", "generate", "ring", "--n", "4", "--protocol", NAME, "--out", "t.json")
    netdp(plugin_env, tmp_path, "data", "generate", "t.json", "--out", "data")
    netdp(plugin_env, tmp_path, "run", "t.json", "--data", "data", "--out", "r", "--virtual")
    said = subprocess.run([sys.executable, "-c", WRONG_MODEL, str(tmp_path / "r")], env=plugin_env,
                          capture_output=True, text=True, check=True).stdout
    assert said.startswith("every logged value is its declared linear combination of inputs and draws False")
    assert "not reproduced" in said


def test_a_networked_mutual_tls_run_audits_clean(plugin_env: dict[str, str], tmp_path: Path) -> None:
    netdp(plugin_env, tmp_path, "topology", "generate", "ring", "--n", "4", "--protocol", NAME, "--sigma", "0.5",
          "--round-deadline", "3", "--out", "t.json")
    published = json.loads((tmp_path / "t.json").read_text())
    for node, port in zip(published["nodes"], free_loopback_ports(len(published["nodes"]))):
        node["address"] = f"127.0.0.1:{port}"
    (tmp_path / "t.json").write_text(json.dumps(published))
    netdp(plugin_env, tmp_path, "certs", "t.json", "--out", "certs")
    netdp(plugin_env, tmp_path, "data", "generate", "t.json", "--out", "data")
    netdp(plugin_env, tmp_path, "run", "t.json", "--data", "data", "--out", "r", "--certs", "certs")
    netdp(plugin_env, tmp_path, "audit", "r", "--out", "a", "--with-private-logs")
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert not failed_checks(report)
    assert len(exact_rdp(report)) == 4 * 3 and all(value > 0 for value in exact_rdp(report).values())


def test_plan_calibrates_and_a_two_point_sweep_runs(plugin_env: dict[str, str], tmp_path: Path) -> None:
    netdp(plugin_env, tmp_path, "topology", "generate", "ring", "--n", "6", "--protocol", NAME, "--out", "t.json")
    said = netdp(plugin_env, tmp_path, "plan", "t.json", "--out", "plan.json", "--target-mean-eps", "2")
    assert "sigma for mean eps <= 2" in " ".join(said.split())
    netdp(plugin_env, tmp_path, "sweep", "--out", "sweep", "--protocol", NAME, "--graph", "ring", "--n", "6",
          "--sigma", "1,2", "--rounds", "2")
    with open(tmp_path / "sweep" / "sweep.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    assert [(row["protocol"], row["sigma"], row["checks_ok"]) for row in rows] == [
        (NAME, "1.0", "true"), (NAME, "2.0", "true")]
    assert float(rows[1]["mean_exact_eps"]) < float(rows[0]["mean_exact_eps"])  # more noise, less loss


def test_muffliato_gd_trains_the_plugin_task_on_its_own_dataset_and_the_audit_replays_it(
        plugin_env: dict[str, str], tmp_path: Path) -> None:
    """The hinge task's dataset is split, four nodes learn a linear SVM virtually, and the auditor, which
    recomputes every step's clipped gradient through the same registered task, reproduces every payload."""
    netdp(plugin_env, tmp_path, "topology", "generate", "ring", "--n", "4", "--protocol", "muffliato-gd",
          "--task", TASK, "--dimension", "3", "--steps", "20", "--gossip-rounds", "1", "--batch", "10",
          "--sigma", "0.2", "--out", "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["protocol"]["task"] == TASK
    said = netdp(plugin_env, tmp_path, "data", "split", "wide-margin", "--topology", "t.json", "--out", "data",
                 "--seed", "1", "--size", "400")
    assert "labels: sign of <w*, x>, margin >= 0.1" in said
    netdp(plugin_env, tmp_path, "run", "t.json", "--data", "data", "--out", "r", "--virtual")
    said = netdp(plugin_env, tmp_path, "audit", "r", "--out", "a", "--with-private-logs", "--data", "data")
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert (report["protocol"], report["learning"]["task"]) == ("muffliato-gd", TASK)
    assert not failed_checks(report), said
    levels = {check["name"]: check["level"] for check in report["checks"]}
    assert levels["transcript reproduces the logged payloads"] == "pass"
    assert levels["every contribution was clipped (private logs)"] == "pass"
    assert all(value > 0 for value in exact_rdp(report).values())
    utility = report["utility"]
    assert utility["metric"] == "accuracy"
    assert utility["netdp"][-1] >= 0.95 > utility["initial"] + 0.3  # the SVM separates the wide margin


def test_a_task_dataset_is_refused_by_a_topology_whose_task_wants_other_labels(plugin_env: dict[str, str],
                                                                               tmp_path: Path) -> None:
    netdp(plugin_env, tmp_path, "topology", "generate", "ring", "--n", "4", "--protocol", "muffliato-gd",
          "--task", "least_squares", "--dimension", "3", "--steps", "2", "--gossip-rounds", "1", "--batch", "4",
          "--out", "t.json")
    done = subprocess.run([str(BIN / "netdp"), "data", "split", "wide-margin", "--topology", "t.json", "--out",
                           "data"], cwd=tmp_path, env=plugin_env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "wide-margin is a classification task" in done.stderr and "--task logistic" in done.stderr
