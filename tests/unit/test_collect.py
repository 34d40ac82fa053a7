"""`netdp collect` against a scripted docker CLI: which task counts, what is copied, what is reported.

The real engine is exercised by tests/docker/test_swarm_stack.py; here the docker answers are
fixed so that retried tasks, failed nodes and missing files can be checked in milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from coordinator_tools import collect
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.errors import ConfigError
from node.topology import MuffliatoParams, save_topology

STACK = "st"
HERE = "machine-here"


def service(name: str, logs: dict[str, int], cluster: Path) -> dict:
    """Service `name` as `docker service inspect` shows it: container log folder -> the node id it holds."""
    mounts = [{"Target": target, "Source": str(cluster / "run" / f"node-{node}")} for target, node in logs.items()]
    mounts.append({"Target": "/netdp/topology.json", "Source": str(cluster / "run" / "topology.json")})
    spec = {"Name": f"{STACK}_{name}", "TaskTemplate": {"ContainerSpec": {"Mounts": mounts}}}
    return {"ID": f"svc-{name}", "Spec": spec}


def task(name: str, created: str, state: str, err: str = "") -> dict:
    return {"ServiceID": f"svc-{name}", "CreatedAt": created, "NodeID": HERE, "Status": {"State": state, "Err": err}}


def write_run(cluster: Path, addresses: list[str], estimates: tuple[int, ...]) -> None:
    """The run folder `netdp compose` wrote, as the nodes left it: every view and private log, these estimates."""
    (cluster / "run").mkdir(parents=True)
    save_topology(build_topology(generate("complete", n=len(addresses)), graph_name="complete", run_id="collect-test",
                                 protocol=MuffliatoParams(sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=2, dimension=1),
                                 addresses=addresses), cluster / "run" / "topology.json")
    for node in range(len(addresses)):
        (cluster / "run" / f"node-{node}").mkdir()
        (cluster / "run" / f"node-{node}" / "view.log").write_bytes(b"view %d" % node)
        (cluster / "run" / f"node-{node}" / "private.log").write_bytes(b"secret")
    for node in estimates:
        (cluster / "run" / f"node-{node}" / "estimate.json").write_text("{}")


def script_docker(monkeypatch: pytest.MonkeyPatch, services: list[dict], tasks: list[dict]) -> None:
    """The docker CLI answers as a swarm running `services` whose tasks are `tasks`, all on this machine."""
    answers = {
        ("service", "ls"): "\n".join(service["ID"] for service in services),
        ("service", "inspect"): json.dumps(services),
        ("service", "ps"): "\n".join(f"t{index}" for index in range(len(tasks))),
        ("inspect", "--type"): json.dumps(tasks),
        ("info", "--format"): HERE,
    }
    monkeypatch.setattr(collect, "_docker", lambda *args: answers[args[:2]])


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two nodes on this machine: node 0 failed once, then completed; node 1 failed and wrote no estimate."""
    cluster = tmp_path / "cluster"
    write_run(cluster, ["node-0:7000", "node-1:7001"], estimates=(0,))
    script_docker(monkeypatch, [service(f"node-{v}", {"/netdp/logs": v}, cluster) for v in (0, 1)],
                  [task("node-0", "2024-01-01T00:00:02Z", "complete"),
                   task("node-0", "2024-01-01T00:00:01Z", "failed", "task: non-zero exit (2)"),
                   task("node-1", "2024-01-01T00:00:01Z", "failed", "task: non-zero exit (2)")])
    return cluster


def test_newest_task_of_each_service_counts(cluster):
    tasks = collect.stack_tasks(STACK)
    assert {name: task.state for name, task in tasks.items()} == {"node-0": "complete", "node-1": "failed"}
    assert tasks["node-0"].mounts[PurePosixPath("/netdp/logs")] == PurePosixPath(cluster / "run" / "node-0")


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


def test_a_service_hosting_several_ids_gives_each_id_its_own_log_folder(tmp_path, monkeypatch):
    """`nodes-0-2` hosts the three ids of one address, each id's logs in a mount of their own."""
    cluster = tmp_path / "cluster"
    write_run(cluster, ["nodes-0-2:7000"] * 3, estimates=(0, 1, 2))
    logs = {f"/netdp/logs/node-{v}": v for v in range(3)}
    script_docker(monkeypatch, [service("nodes-0-2", logs, cluster)],
                  [task("nodes-0-2", "2024-01-01T00:00:01Z", "complete")])
    out = tmp_path / "collected"
    assert collect.collect(STACK, out, timeout_s=1.0) == []
    for v in range(3):
        assert sorted(p.name for p in (out / f"node-{v}").iterdir()) == ["estimate.json", "view.log"]
        assert (out / f"node-{v}" / "view.log").read_bytes() == b"view %d" % v
