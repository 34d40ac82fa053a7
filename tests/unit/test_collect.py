"""`netdp collect` against a scripted docker CLI: which task counts, what is copied, what is reported.

The real engine is exercised by tests/docker/test_swarm_stack.py; here the docker answers are
fixed so that retried tasks, failed nodes and missing files can be checked in milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_tools import collect
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.errors import ConfigError
from node.topology import MuffliatoParams, save_topology

STACK = "st"
HERE = "machine-here"


def service(node: int, cluster: Path) -> dict:
    mounts = [{"Target": "/netdp/logs", "Source": str(cluster / "run" / f"node-{node}")},
              {"Target": "/netdp/topology.json", "Source": str(cluster / "run" / "topology.json")}]
    return {"ID": f"svc{node}", "Spec": {"Name": f"{STACK}_node-{node}",
                                          "TaskTemplate": {"ContainerSpec": {"Mounts": mounts}}}}


def task(node: int, created: str, state: str, err: str = "") -> dict:
    return {"ServiceID": f"svc{node}", "CreatedAt": created, "NodeID": HERE, "Status": {"State": state, "Err": err}}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two nodes on this machine: node 0 failed once, then completed; node 1 failed and wrote no estimate."""
    cluster = tmp_path / "cluster"
    (cluster / "run").mkdir(parents=True)
    save_topology(build_topology(generate("complete", n=2), graph_name="complete", run_id="collect-test",
                                 protocol=MuffliatoParams(sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=2, dimension=1),
                                 addresses=["node-0:7000", "node-1:7001"]), cluster / "run" / "topology.json")
    for node in (0, 1):
        (cluster / "run" / f"node-{node}").mkdir()
        (cluster / "run" / f"node-{node}" / "view.log").write_bytes(b"view %d" % node)
        (cluster / "run" / f"node-{node}" / "private.log").write_bytes(b"secret")
    (cluster / "run" / "node-0" / "estimate.json").write_text("{}")
    answers = {
        ("service", "ls"): "svc0\nsvc1\n",
        ("service", "inspect"): json.dumps([service(0, cluster), service(1, cluster)]),
        ("service", "ps"): "t0old\nt0\nt1\n",
        ("inspect", "--type"): json.dumps([task(0, "2024-01-01T00:00:02Z", "complete"),
                                           task(0, "2024-01-01T00:00:01Z", "failed", "task: non-zero exit (2)"),
                                           task(1, "2024-01-01T00:00:01Z", "failed", "task: non-zero exit (2)")]),
        ("info", "--format"): HERE,
    }
    monkeypatch.setattr(collect, "_docker", lambda *args: answers[args[:2]])
    return cluster


def test_newest_task_of_each_service_counts(cluster):
    tasks = collect.stack_tasks(STACK)
    assert {name: task.state for name, task in tasks.items()} == {"node-0": "complete", "node-1": "failed"}
    assert str(tasks["node-0"].log_dir) == str(cluster / "run" / "node-0")


def test_copies_public_logs_and_reports_what_went_wrong(cluster, tmp_path):
    out = tmp_path / "collected"
    problems = collect.collect(STACK, out, timeout_s=1.0)
    assert (out / "topology.json").read_bytes() == (cluster / "run" / "topology.json").read_bytes()
    assert sorted(p.name for p in (out / "node-0").iterdir()) == ["estimate.json", "view.log"]
    assert (out / "node-1" / "view.log").read_bytes() == b"view 1"
    assert not list(out.glob("*/private.log"))
    assert len(problems) == 2
    assert "node 1: task failed task: non-zero exit (2)" in problems[0]
    assert "node 1: no" in problems[1] and "estimate.json" in problems[1]


def test_refuses_a_folder_that_holds_another_run(cluster, tmp_path):
    (tmp_path / "collected").mkdir()
    (tmp_path / "collected" / "topology.json").write_text("{}")
    with pytest.raises(ConfigError, match="not empty"):
        collect.collect(STACK, tmp_path / "collected", timeout_s=1.0)
