"""Every bad flag a newcomer tries is refused in one line naming what was wrong, with no traceback and no file
written; `--version` answers; a second demo into a used folder is refused before it writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_tools import cli
from coordinator_tools.cluster.demo import claim_new_folder
from node import cli as node_cli
from node.errors import ConfigError

BAD_FLAGS = [
    (["demo", "--n", "12"], "hypercube needs n a power of 2, got n = 12"),
    (["demo", "--sigma", "-0.5"], "argument --sigma: Input should be greater than or equal to 0"),
    (["demo", "--graph", "grid", "--n", "10"], "n = 10 is not a perfect square"),
    (["demo", "--graph", "karate_club", "--n", "16"], "karate_club does not take n"),
    (["demo", "--dimension", "0"], "argument --dimension: Input should be greater than or equal to 1"),
    (["demo", "--protocol", "personalized-cd", "--epsilon", "-2"],
     "argument --epsilon: Input should be greater than 0"),
    (["compare", "--n", "12"], "hypercube needs n a power of 2, got n = 12"),
    (["compare", "--clip", "-1"], "argument --clip: Input should be greater than 0"),
    (["compare", "--learning-rate", "-1"], "argument --learning-rate: Input should be greater than 0"),
    (["compare", "--walk-learning-rate", "-1"], "argument --walk-learning-rate: Input should be greater than 0"),
    (["compare", "--batch", "0"], "argument --batch: expected a whole number >= 1, got '0'"),
    (["audit", "RUN", "--out", "A", "--delta", "2"], "argument --delta: expected a number in (0, 1), got '2'"),
    (["audit", "RUN", "--out", "A", "--alpha", "0.5"], "argument --alpha: expected a Renyi order > 1, got '0.5'"),
    (["plan", "t.json", "--out", "p.json", "--sigma", "-1"], "argument --sigma: expected a number >= 0, got '-1'"),
    (["demo", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_FLAGS, ids=[" ".join(argv) for argv, _ in BAD_FLAGS])
def test_a_bad_flag_is_one_line_and_writes_nothing(argv: list[str], message: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(cli.main(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())  # nothing written: no runs/ folder, no topology, no data


@pytest.mark.parametrize(("main", "name"), [(cli.main, "netdp"), (node_cli.main, "netdp-node")])
def test_version_names_the_installed_package(main, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out.split()
    assert shown[0] == name and shown[1][0].isdigit()


def test_a_demo_folder_is_claimed_once_and_a_used_one_is_left_as_it_was(tmp_path: Path) -> None:
    out = claim_new_folder(tmp_path / "demo")
    assert [path.name for path in out.iterdir()] == ["topology.json"]
    with pytest.raises(ConfigError, match="is not empty"):
        claim_new_folder(out)
    (out / "topology.json").write_text("a run's topology")
    with pytest.raises(ConfigError, match="is not empty"):
        claim_new_folder(out)
    assert (out / "topology.json").read_text() == "a run's topology"
