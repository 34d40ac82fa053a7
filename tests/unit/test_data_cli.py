"""`netdp data generate`: it says which seed made the data, and never silently replaces data."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.cli import main
from node.data import load_vector

PROTOCOLS = {
    "muffliato": ("--rounds", "5"),
    "muffliato-async": ("--protocol", "muffliato-async", "--exchanges", "10"),
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(params=sorted(PROTOCOLS))
def topology(request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "topo.json"
    argv = ("topology", "generate", "ring", "--n", "5", "--dimension", "3", *PROTOCOLS[request.param])
    assert run(capsys, *argv, "--out", str(path))[0] == 0
    return path


def values(folder: Path) -> np.ndarray:
    return np.stack([load_vector(folder / f"node-{v}.json", 3) for v in range(5)])


def test_generate_prints_its_seed_and_the_seed_makes_the_same_data(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, _ = run(capsys, "data", "generate", str(topology), "--out", str(tmp_path / "a"))
    assert code == 0
    seed = re.search(r"seed (\d+)", stdout)
    assert seed is not None and f"--seed {seed[1]}" in stdout
    assert run(capsys, "data", "generate", str(topology), "--out", str(tmp_path / "b"), "--seed", seed[1])[0] == 0
    np.testing.assert_array_equal(values(tmp_path / "a"), values(tmp_path / "b"))
    assert len(np.unique(values(tmp_path / "a"), axis=0)) == 5


def test_a_given_seed_is_printed_and_other_seeds_give_other_data(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, stdout, _ = run(capsys, "data", "generate", str(topology), "--out", str(tmp_path / "a"), "--seed", "7")
    assert "seed 7" in stdout
    run(capsys, "data", "generate", str(topology), "--out", str(tmp_path / "b"), "--seed", "8")
    assert not np.array_equal(values(tmp_path / "a"), values(tmp_path / "b"))


def test_a_folder_with_files_is_refused_unless_forced(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "data"
    assert run(capsys, "data", "generate", str(topology), "--out", str(out), "--seed", "1")[0] == 0
    first = values(out)
    code, _, err = run(capsys, "data", "generate", str(topology), "--out", str(out), "--seed", "2")
    assert code == 2 and err.count("\n") == 1
    assert f"netdp: error: {out} is not empty; pass --force" in err
    np.testing.assert_array_equal(values(out), first)
    assert run(capsys, "data", "generate", str(topology), "--out", str(out), "--seed", "2", "--force")[0] == 0
    assert not np.array_equal(values(out), first)


def test_an_empty_folder_is_fine_and_a_file_is_not(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(capsys, "data", "generate", str(topology), "--out", str(empty))[0] == 0
    a_file = tmp_path / "file"
    a_file.write_text("")
    code, _, err = run(capsys, "data", "generate", str(topology), "--out", str(a_file), "--force")
    assert code == 2 and "is a file, not a folder" in err and err.count("\n") == 1


def test_a_negative_seed_is_a_one_line_error_and_writes_nothing(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "data", "generate", str(topology), "--out", str(tmp_path / "data"), "--seed", "-1")
    assert code == 2 and err == "netdp: error: --seed must be 0 or more, not -1\n"
    assert not (tmp_path / "data").exists()
