"""`netdp run` checks its inputs once, before any node process starts, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_tools.cli import main
from coordinator_tools.cluster import launch
from coordinator_tools.cluster.launch import LaunchOptions, check_launch_inputs
from node.security import CA_FILE, CERT_FILE, KEY_FILE
from node.topology import load_topology

N = 5


@pytest.fixture
def files(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 5-node topology of dimension 3, its data and (fake) certificates; starting a node fails the test."""
    argv = ("topology", "generate", "ring", "--n", str(N), "--dimension", "3", "--rounds", "3")
    assert main([*argv, "--out", str(tmp_path / "topo.json")]) == 0
    assert main(["data", "generate", str(tmp_path / "topo.json"), "--out", str(tmp_path / "data")]) == 0
    for v in range(N):
        folder = tmp_path / "certs" / f"node-{v}"
        folder.mkdir(parents=True)
        for name in (CA_FILE, CERT_FILE, KEY_FILE):
            (folder / name).write_text("not checked here\n")
    capsys.readouterr()

    def no_node_may_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("a node process was started before the inputs were checked")

    monkeypatch.setattr(launch, "start_node_process", no_node_may_start)
    return tmp_path


def run(files: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    argv = ["run", str(files / "topo.json"), "--data", str(files / "data"), "--out", str(files / "r"), *extra]
    code = main(argv)
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, expected: str, files: Path) -> None:
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("netdp: error: ")
    assert expected in err
    assert "Traceback" not in err
    assert not (files / "r").exists()


def test_a_kill_of_a_node_that_does_not_exist_is_refused(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(files, capsys, "--insecure", "--kill", "1@1", "--kill", "33@2")
    assert_refused(code, err, "--kill names node 33, but the topology's nodes are 0..4", files)


def test_a_missing_certificate_folder_is_refused(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in (CA_FILE, CERT_FILE, KEY_FILE):
        (files / "certs" / "node-3" / name).unlink()
    (files / "certs" / "node-3").rmdir()
    code, err = run(files, capsys, "--certs", str(files / "certs"))
    assert_refused(code, err, "has no certificate folder for node 3", files)


def test_a_missing_certificate_file_is_refused(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "certs" / "node-2" / KEY_FILE).unlink()
    code, err = run(files, capsys, "--certs", str(files / "certs"))
    assert_refused(code, err, f"has no {KEY_FILE} in {files / 'certs' / 'node-2'} for node 2", files)


def test_a_missing_data_file_is_refused(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "data" / "node-4.json").unlink()
    code, err = run(files, capsys, "--insecure")
    assert_refused(code, err, "no data file for node 4", files)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"value": [1.0, 2.0]}, "holds 2 values, the topology's dimension is 3"),
        ({"value": [1.0, "NaN", 2.0]}, "cannot read a numeric vector"),
        ({"value": [1.0, 1e400, 2.0]}, "holds NaN or infinite values"),
    ],
)
def test_a_data_file_that_does_not_fit_the_topology_is_refused(
    files: Path, capsys: pytest.CaptureFixture[str], content: dict, expected: str
) -> None:
    (files / "data" / "node-1.json").write_text(json.dumps(content).replace('"NaN"', '"x"'))
    code, err = run(files, capsys, "--insecure")
    assert_refused(code, err, expected, files)
    assert "node-1.json" in err


def test_good_inputs_pass_and_give_every_node_its_data_file(files: Path) -> None:
    topology = load_topology(files / "topo.json")
    options = LaunchOptions(certs_dir=files / "certs", kill_at_round={4: 1})
    data_files = check_launch_inputs(topology, files / "data", options)
    assert data_files == {v: files / "data" / f"node-{v}.json" for v in range(N)}
