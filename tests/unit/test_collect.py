"""`netdp collect` against a scripted docker CLI and from run folders: which task counts, what is copied (whole or
structure-only), what is reported.

The real engine is exercised by tests/docker/test_swarm_stack.py; here the docker answers are
fixed so that retried tasks, failed nodes and missing files can be checked in milliseconds.
"""

from __future__ import annotations

import json
import stat
import struct
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

from coordinator_tools import collect
from coordinator_tools.cli import main
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.errors import ConfigError
from node.protocols.muffliato import MuffliatoParams
from node.topology import save_topology
from node.viewlog import ViewLogWriter, read_log

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


# --- structure-only, and run folders on this machine ----------------------------------------------


def log_real_views(rundir: Path, n: int) -> list[bytes]:
    """Real view logs in `rundir` instead of write_run's (node v sent (v + 0.5, -v - 0.25)), a stderr; the values."""
    values = []
    for node in range(n):
        (rundir / f"node-{node}" / "view.log").unlink()
        header = viewlog_pb2.RunHeader(run_id="collect-test", protocol="muffliato", node_id=node, section="public")
        value = np.array([node + 0.5, -node - 0.25])
        with ViewLogWriter(rundir / f"node-{node}" / "view.log", header) as log:
            log.append(viewlog_pb2.Record(sent=viewlog_pb2.MessageSent(peer=1 - node, payload=to_tensor(value),
                                                                       delivered=True, attempts=1)))
        (rundir / f"node-{node}" / "stderr.txt").write_text(f"node {node}: value {value.tolist()}\n")
        values += [struct.pack("<d", x) for x in value]
    return values


def assert_structure_only(out: Path, n: int, values: list[bytes]) -> None:
    """out holds each node's view log only, 0600, marked stripped, its payload's size kept and no value byte."""
    for node in range(n):
        assert [p.name for p in (out / f"node-{node}").iterdir()] == ["view.log"]
        view = out / f"node-{node}" / "view.log"
        assert stat.S_IMODE(view.stat().st_mode) == 0o600
        contents = read_log(view)
        assert contents.damage is None and contents.header.payloads_stripped and contents.header.node_id == node
        (sent,) = contents.of_kind("sent")
        assert (sent.payload.data, sent.payload.stripped_bytes, list(sent.payload.shape)) == (b"", 16, [2])
        assert not any(value in view.read_bytes() for value in values)


def test_a_run_folder_is_collected_structure_only_and_in_full(cluster, tmp_path):
    rundir = cluster / "run"
    values = log_real_views(rundir, 2)
    (rundir / "run.json").write_text('{"n": 2}')
    out = tmp_path / "structure"
    assert collect.collect_folder(rundir, out, structure_only=True) == []
    assert sorted(p.name for p in out.iterdir()) == ["node-0", "node-1", "run.json", "topology.json"]
    assert (out / "run.json").read_text() == '{"n": 2}'
    assert_structure_only(out, 2, values)

    full = tmp_path / "full"
    problems = collect.collect_folder(rundir, full)
    assert problems == [f"node 1: no {rundir / 'node-1' / 'estimate.json'}"]
    assert sorted(p.name for p in (full / "node-0").iterdir()) == ["estimate.json", "view.log"]
    assert (full / "node-0" / "view.log").read_bytes() == (rundir / "node-0" / "view.log").read_bytes()
    assert stat.S_IMODE((full / "node-0" / "view.log").stat().st_mode) == 0o600


def test_the_command_takes_a_compose_project_and_reports_a_log_it_cannot_strip(cluster, tmp_path, capsys):
    values = log_real_views(cluster / "run", 2)
    (cluster / "docker-compose.yml").write_text("{}")
    (cluster / "run" / "node-1" / "view.log").unlink()
    (cluster / "run" / "node-1" / "view.log").write_bytes(b"not a log")
    out = tmp_path / "structure"
    assert main(["collect", "--structure-only", str(cluster), "--out", str(out)]) == 1
    said = capsys.readouterr()
    assert "node 1:" in said.err and "bad magic" in said.err and "not copied" in said.err
    assert f"collected the structure of run folder {cluster / 'run'} into {out}" in " ".join(said.out.split())
    assert not (out / "node-1" / "view.log").exists()
    assert_structure_only(out, 1, values)


def test_a_stack_is_collected_structure_only(cluster, tmp_path):
    values = log_real_views(cluster / "run", 2)
    out = tmp_path / "structure"
    problems = collect.collect(STACK, out, timeout_s=1.0, structure_only=True)
    assert problems == ["node 1: task failed task: non-zero exit (2)"]  # no estimate.json is looked for
    assert sorted(p.name for p in out.iterdir()) == ["node-0", "node-1", "topology.json"]
    assert_structure_only(out, 2, values)
