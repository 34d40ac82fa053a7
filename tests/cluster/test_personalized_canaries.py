"""The canary audit of real personalized-CD runs: `netdp run --canaries`, then `netdp audit`, one process per agent.

Six agents of the paper's synthetic task, 4 updates each at ε̄ = 10 (large: the neighbours' loss
is large enough for 600 canaries to show), seeded simulation samplers. The honest run audits clean,
and its canaries certify a positive ε for some neighbours, never above the exact composition. The
same run with agent BROKEN drawing a tenth of its noise (`--break BROKEN:noise-scale=0.1`) fails the
audit (exit status 1), and the noise check names the agent.

An agent stops when its own updates are done, so a broadcast sent after all its neighbours stopped reaches
nobody; a broken run in which none of BROKEN's broadcasts reached a neighbour (its clock ran late, or its process
came up late on a loaded machine) leaked nothing and has nothing to catch: it is run again, up to TRIES times.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coordinator_tools.cli import main
from coordinator_tools.cluster.demo_protocols import loopback_addresses
from coordinator_tools.dataprep.personalized_task import generate_task, task_topology, write_task
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import NetworkParams, save_topology
from node.viewlog import VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster
N, P, CANARIES, BROKEN = 6, 3, 600, 3
# Updates about 1 s apart, so every agent is up before any finishes and each agent's broadcasts reach a neighbour
# (on a loaded machine processes come up seconds apart; a broadcast nobody received carries no canary to check);
# an agent waits at most STARTUP_S for a neighbour to come up, so a late process costs seconds, not a minute.
PARAMS = PersonalizedCDParams(dimension=P, mu=1.0, lipschitz=0.3, max_examples=100, updates=4, epsilon=10.0,
                              delta=1e-5, tick_rate=1.0)
STARTUP_S = 5.0
TRIES = 3
NOISE_CHECK = "noise in the run's messages is the published noise (canaries)"


def audited_run(root: Path, *flags: str) -> Path:
    """`netdp run --canaries` of the task into root/run, with `flags` added."""
    task = generate_task(N, P, seed=1)
    save_topology(task_topology(task, PARAMS, run_id=root.name, addresses=loopback_addresses(N),
                                network=NetworkParams(round_deadline_s=2.0, startup_deadline_s=STARTUP_S)),
                  root / "topology.json")
    write_task(task, root / "data")
    assert main(["run", str(root / "topology.json"), "--data", str(root / "data"), "--out", str(root / "run"),
                 "--insecure", "--sampler", "simulation", "--sim-seed", "5", "--canaries", str(CANARIES),
                 *flags]) == 0
    return root / "run"


def broken_run(root: Path, spec: str) -> Path:
    """`audited_run` with BROKEN broken by `spec`, in a run where some neighbour received one of its broadcasts."""
    for attempt in range(TRIES):
        rundir = audited_run(root / f"try-{attempt}", "--break", f"{BROKEN}:{spec}")
        if any(received.peer == BROKEN for node in range(N)
               for received in read_log(rundir / f"node-{node}" / VIEW_LOG_NAME).of_kind("received")):
            return rundir
    pytest.fail(f"in {TRIES} runs no broadcast of agent {BROKEN} reached a neighbour")


def audit(rundir: Path, out: Path) -> tuple[int, dict]:
    code = main(["audit", str(rundir), "--out", str(out), "--attack-pairs", "none", "--attack-seed", "1"])
    return code, json.loads((out / "report.json").read_text())


def test_the_canaries_of_an_honest_run_certify_some_neighbours_loss_and_stay_below_the_exact(tmp_path: Path):
    code, report = audit(audited_run(tmp_path), tmp_path / "audit")
    assert code == 0, report["checks"]
    audited = [pair for pair in report["pairs"] if "empirical" in pair]  # observers that saw the source's canaries
    assert report["canaries"]["canaries"] == CANARIES and report["canaries"]["pairs"] == len(audited) > 0
    assert all(pair["empirical"]["eps_lower"] <= pair["exact"]["eps_upper"] for pair in audited)
    assert any(pair["empirical"]["eps_lower"] > 0 for pair in audited if pair["hop_distance"] == 1)
    assert max(pair["exact"]["eps_upper"] for pair in report["pairs"]) <= PARAMS.epsilon * (1 + 1e-9)


def test_an_agent_drawing_a_tenth_of_its_noise_fails_the_audit_which_names_it(tmp_path: Path, capsys):
    code, report = audit(broken_run(tmp_path, "noise-scale=0.1"), tmp_path / "audit")
    assert code == 1
    (noise,) = [check for check in report["checks"] if check["name"] == NOISE_CHECK]
    named = re.search(r"estimated from the canary coordinates: node (\d+) ([\d.]+)x", noise["detail"])
    assert not noise["ok"] and named and int(named[1]) == BROKEN and float(named[2]) < 0.5, noise["detail"]
    assert f"node {BROKEN} {named[2]}x the published" in " ".join(capsys.readouterr().out.split())


def test_an_agent_leaking_its_raw_gradient_fails_the_audit_which_names_it(tmp_path: Path):
    code, report = audit(broken_run(tmp_path, "leak-raw"), tmp_path / "audit")
    assert code == 1
    (values,) = [check for check in report["checks"] if check["name"].startswith("every value that reached a node")]
    assert not values["ok"] and f"from node {BROKEN})" in values["detail"], values["detail"]
    leaked = report["canaries"]["values_outside_the_model"]
    assert leaked and {entry["sender"] for entry in leaked} == {BROKEN}
