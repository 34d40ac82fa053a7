"""One experiment file: the example sweep runs from it, a flag on the command line wins over its key, the sweep
folder keeps a copy, and a bad key or value is refused in one line naming the file and the key."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from coordinator_tools import cli
from coordinator_tools.experiment import COPY_FILE

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "experiment.toml"


def test_the_example_sweep_runs_from_its_file_and_its_folder_keeps_a_copy(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "sweep"
    assert cli.main(["sweep", "--experiment", str(EXAMPLE), "--out", str(out), "--n", "4"]) == 0
    with open(out / "sweep.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert sorted((row["protocol"], row["graph"], row["n"], row["T"], row["sigma"], row["mode"]) for row in rows) == [
        ("muffliato", "ring", "4", "2", "1.0", "virtual"), ("muffliato", "ring", "4", "2", "2.0", "virtual")]
    assert all(row["checks_ok"] == "true" for row in rows)
    assert (out / COPY_FILE).read_text() == (EXAMPLE.read_text() + "# overridden on the command line: --out "
                                             f"{out} --n 4\n")
    assert not (tmp_path / "runs").exists()  # the file's own `out` was overridden


BAD_FILES = [
    ('command = "demo"\nsigma = -0.5\n', ["demo"], "key 'sigma': Input should be greater than or equal to 0"),
    ('sigma = -0.5\n', ["demo", "--sigma", "-1"], "argument --sigma: Input should be greater than or equal to 0"),
    ("sigmaa = 1\n", ["demo"], "unknown key 'sigmaa' for `netdp demo` (did you mean 'sigma'?)"),
    ("timeout = -3\n", ["demo"], "key 'timeout': expected a number > 0, got '-3'"),
    ('protocol = "nope"\n', ["demo"], "key 'protocol': invalid choice 'nope' (choose from 'decor', "),
    ('insecure = "yes"\n', ["demo"], "key 'insecure': expected true or false, got 'yes'"),
    ("batch = 0\n", ["compare"], "key 'batch': expected a whole number >= 1, got '0'"),
    ("clip = -1\n", ["compare"], "key 'clip': Input should be greater than 0"),
    ('command = "demo"\n', ["run"], "key 'command': this file is for `netdp demo`, not `netdp run`"),
    ("n = [1\n", ["sweep"], "not valid TOML"),
]


@pytest.mark.parametrize(("text", "argv", "message"), BAD_FILES, ids=[message for _, _, message in BAD_FILES])
def test_a_bad_experiment_file_is_one_line_naming_its_key_and_writes_nothing(
        text: str, argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "experiment.toml"
    path.write_text(text)
    assert cli.main([argv[0], "--experiment", str(path), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert [entry.name for entry in tmp_path.iterdir()] == ["experiment.toml"]
