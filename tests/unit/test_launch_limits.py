"""A slow start and a stuck run are told apart: each has its own limit, and the error names it in seconds and
by its flag; progress shows the node processes coming up, as plain lines when the output is no terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coordinator_tools.cluster import command, launch
from coordinator_tools.cluster.launch import ClusterResult, LaunchOptions, LaunchProgress, run_cluster
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.errors import NetdpError
from node.protocols.muffliato import MuffliatoParams
from node.topology import save_topology
from node.viewlog import VIEW_LOG_NAME

# A stand-in for a node process: opens its view log (it is up) when told to, then hangs.
HANGING_NODE = ("import pathlib, sys, time\n"
                "if sys.argv[2] == 'up': (pathlib.Path(sys.argv[1]) / '" + VIEW_LOG_NAME + "').touch()\n"
                "time.sleep(60)\n")


def _topology(tmp_path: Path) -> Path:
    protocol = MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=3, dimension=2)
    path = tmp_path / "topology.json"
    save_topology(build_topology(generate("ring", n=4), graph_name="ring", run_id="limits", protocol=protocol), path)
    return path


def _hanging_nodes(monkeypatch: pytest.MonkeyPatch, *, come_up: bool) -> None:
    def start(rundir: Path, node_id: int, data_file: Path, options: LaunchOptions) -> subprocess.Popen:
        log_dir = launch.node_log_dir(rundir, node_id)
        log_dir.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen([sys.executable, "-c", HANGING_NODE, str(log_dir), "up" if come_up else "slow"])

    monkeypatch.setattr(launch, "check_launch_inputs", lambda topology, data_dir, options: {
        v: Path(data_dir) / f"node-{v}.json" for v in range(topology.n)})
    monkeypatch.setattr(launch, "start_node_process", start)


def test_processes_that_do_not_come_up_overrun_the_startup_allowance_not_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hanging_nodes(monkeypatch, come_up=False)
    seen: list[LaunchProgress] = []
    result = run_cluster(_topology(tmp_path), tmp_path, tmp_path / "run",
                         LaunchOptions(startup_timeout_s=0.6, timeout_s=100.0), on_progress=seen.append)
    assert result.overrun is not None and (result.overrun.phase, result.overrun.limit_s) == ("startup", 0.6)
    assert (result.overrun.processes_up, result.overrun.processes) == (0, 4)
    assert seen and {(state.processes_up, state.processes) for state in seen} == {(0, 4)}
    with pytest.raises(NetdpError) as caught:
        command.report_failures(result)
    assert str(caught.value).startswith("0 of 4 node processes had started after 0.6 s, the start-up allowance")
    assert "--startup-timeout SECONDS" in str(caught.value) and str(result.rundir) in str(caught.value)


def test_a_run_that_does_not_finish_overruns_its_own_limit_counted_once_processes_are_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hanging_nodes(monkeypatch, come_up=True)
    seen: list[LaunchProgress] = []
    result = run_cluster(_topology(tmp_path), tmp_path, tmp_path / "run",
                         LaunchOptions(startup_timeout_s=30.0, timeout_s=0.5), on_progress=seen.append)
    assert result.overrun is not None and (result.overrun.phase, result.overrun.limit_s) == ("run", 0.5)
    assert seen[-1].processes_up == 4
    with pytest.raises(NetdpError, match=r"did not finish within 0\.5 s of its processes starting, the run's limit "
                                         r"\(raise it with --timeout SECONDS\)"):
        command.report_failures(result)


def test_progress_is_plain_lines_when_the_output_is_no_terminal(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    def runner(topology_path: Path, data_dir: Path, rundir: Path, options: LaunchOptions,
               on_progress: launch.ProgressCallback) -> ClusterResult:
        for up, steps in ((0, 0), (0, 0), (2, 0), (4, 3)):
            on_progress(LaunchProgress(dict.fromkeys(range(4), steps), up, 4))
        return ClusterResult(rundir, launch.load_topology(topology_path))

    assert not command.CONSOLE.is_terminal
    command.launch_with_progress(_topology(tmp_path), tmp_path, tmp_path / "run", LaunchOptions(), runner=runner)
    lines = [line.rsplit(" (", 1)[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["node processes up: 0/4", "node processes up: 2/4", "node processes up: 4/4",
                     "local steps started: 12/12"]
