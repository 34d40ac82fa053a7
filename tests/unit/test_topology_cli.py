"""`netdp topology generate | import | show`, run in-process through the real CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_tools.cli import main
from coordinator_tools.theory import muffliato_t_stop, worst_case_spread
from node.topology import Topology, load_topology


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, expected: str) -> None:
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("netdp: error: ")
    assert expected in err


def edge_set(topology: Topology) -> set[tuple[int, int]]:
    return {(edge.u, edge.v) for edge in topology.edges}


def test_generate_writes_a_topology_with_theory_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "topo.json"
    code, stdout, _ = run(capsys, "topology", "generate", "hypercube", "--n", "8", "--out", str(out))
    assert code == 0
    topology = load_topology(out)
    assert topology.n == 8 and len(topology.edges) == 12
    assert topology.graph == "hypercube" and topology.graph_seed is None
    assert topology.weighting == "metropolis"
    assert topology.spectral_gap == pytest.approx(0.5)
    assert topology.protocol.accelerated
    assert topology.protocol.rounds == muffliato_t_stop(8, 0.5, 1.0, worst_case_spread(1.0)) == 3
    assert topology.run_id.startswith("hypercube-")
    assert "spectral gap" in stdout and topology.run_id in stdout


def test_generate_applies_every_publishing_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "topo.json"
    code, _, _ = run(
        capsys,
        *("topology", "generate", "grid", "--rows", "3", "--cols", "4", "--out", str(out)),
        *("--run-id", "demo-1", "--weighting", "min_degree", "--sigma", "2.5", "--sensitivity", "0.5"),
        *("--alpha", "8", "--rounds", "7", "--plain", "--dimension", "3", "--host", "10.0.0.9"),
        *("--base-port", "6000", "--round-deadline", "2.5"),
    )
    assert code == 0
    topology = load_topology(out)
    assert topology.run_id == "demo-1"
    assert topology.weighting == "min_degree"
    assert topology.protocol.model_dump() == {
        "name": "muffliato",
        "sigma": 2.5,
        "sensitivity": 0.5,
        "alpha": 8.0,
        "rounds": 7,
        "accelerated": False,
        "dimension": 3,
    }
    assert topology.nodes[11].address == "10.0.0.9:6011"
    assert topology.network.round_deadline_s == 2.5


def test_plain_gossip_gets_more_theory_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rounds = {}
    for flags in ((), ("--plain",)):
        out = tmp_path / f"topo{len(flags)}.json"
        assert run(capsys, "topology", "generate", "ring", "--n", "20", "--out", str(out), *flags)[0] == 0
        rounds[bool(flags)] = load_topology(out).protocol.rounds
    assert rounds[True] > rounds[False]


def test_a_random_kind_is_reproducible_from_the_recorded_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unseeded, seeded = tmp_path / "a.json", tmp_path / "b.json"
    assert run(capsys, "topology", "generate", "erdos_renyi", "--n", "25", "--out", str(unseeded))[0] == 0
    first = load_topology(unseeded)
    assert first.graph_seed is not None
    argv = ("topology", "generate", "erdos_renyi", "--n", "25", "--seed", str(first.graph_seed), "--out", str(seeded))
    assert run(capsys, *argv)[0] == 0
    assert edge_set(load_topology(seeded)) == edge_set(first)


def test_kind_specific_options_reach_the_generator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sparse, dense = tmp_path / "sparse.json", tmp_path / "dense.json"
    base = ("topology", "generate", "stochastic_block_model", "--n", "30", "--seed", "3", "--blocks", "3")
    assert run(capsys, *base, "--p-in", "0.3", "--p-out", "0.02", "--out", str(sparse))[0] == 0
    assert run(capsys, *base, "--p-in", "1.0", "--p-out", "0.02", "--out", str(dense))[0] == 0
    assert len(load_topology(dense).edges) >= 3 * 45  # three complete blocks of 10
    assert len(load_topology(sparse).edges) < len(load_topology(dense).edges)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("hypercube", "--n", "12"), "power of 2"),
        (("karate_club", "--n", "10"), "karate_club does not take n"),
        (("ring", "--n", "6", "--radius", "0.2"), "ring does not take radius"),
        (("ring", "--n", "6", "--sigma", "0"), "pass the number of rounds explicitly"),
        (("hypercube", "--n", "8", "--weighting", "min_degree"), "does not converge"),
        (("ring", "--n", "6", "--alpha", "0.5"), "argument --alpha"),
        (("ring", "--n", "6", "--run-id", "bad id!"), "field 'run_id'"),
        (("ring", "--n", "6", "--base-port", "65534"), "field 'nodes.2.address'"),
    ],
)
def test_bad_generate_parameters_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "topo.json"
    code, _, err = run(capsys, "topology", "generate", *argv, "--out", str(out))
    assert_one_line_error(code, err, expected)
    assert not out.exists()


def test_sigma_zero_with_explicit_rounds_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "topo.json"
    argv = ("topology", "generate", "ring", "--n", "6", "--sigma", "0", "--rounds", "40", "--out", str(out))
    assert run(capsys, *argv)[0] == 0
    assert load_topology(out).protocol.sigma == 0.0
    code, stdout, _ = run(capsys, "topology", "show", str(out))
    assert code == 0 and "none (sigma = 0)" in stdout


def test_import_reads_an_edge_list_with_comments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text("# a square with a diagonal\n0 1\n1 2  # middle\n\n2 3\n3 0\n0 2\n")
    out = tmp_path / "topo.json"
    assert run(capsys, "topology", "import", str(edges), "--out", str(out), "--rounds", "5")[0] == 0
    topology = load_topology(out)
    assert edge_set(topology) == {(0, 1), (1, 2), (2, 3), (0, 3), (0, 2)}
    assert topology.graph == "file:edges.txt"
    assert topology.weighting == "metropolis"
    assert topology.edge_weights[(0, 2)] == pytest.approx(1 / 4)
    assert topology.edge_weights[(1, 2)] == pytest.approx(1 / 4)


def test_import_keeps_explicit_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edges = tmp_path / "weighted.txt"
    edges.write_text("0 1 0.5\n1 2 0.25\n2 0 0.125\n")
    out = tmp_path / "topo.json"
    assert run(capsys, "topology", "import", str(edges), "--out", str(out))[0] == 0
    topology = load_topology(out)
    assert topology.weighting == "explicit"
    assert topology.edge_weights == {(0, 1): 0.5, (1, 0): 0.5, (1, 2): 0.25, (2, 1): 0.25, (0, 2): 0.125, (2, 0): 0.125}
    code, _, err = run(capsys, "topology", "import", str(edges), "--out", str(out), "--weighting", "metropolis")
    assert_one_line_error(code, err, "gives explicit weights; drop --weighting")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("0 1\n1 x\n", ":2: node id 'x' is not an integer"),
        ("0 1\n1 -2\n", ":2: node id -2 is negative"),
        ("0 1\n# comment\n1 1\n", ":3: self-loop on node 1"),
        ("0 1\n1 2\n1 0\n", ":3: edge (0, 1) already given on line 1"),
        ("0 1 0.5\n1 2\n", ":2: either every edge has a weight or none does"),
        ("0 1 1.5\n", ":1: weight 1.5 is not in (0, 1]"),
        ("0 1 heavy\n", ":1: weight 'heavy' is not a number"),
        ("0 1 0.5 7\n", ":1: expected 'u v' or 'u v weight', got 4 columns"),
        ("0 2\n2 3\n", "node 1 of 0..3 has none"),
        ("# nothing\n\n", "no edges"),
        ("0 1\n2 3\n", "graph is not connected: it has 2 components"),
        ("0 1 0.75\n1 2 0.5\n", "explicit weights of node 1 sum to 1.250000 > 1"),
    ],
)
def test_a_bad_edge_list_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text(content)
    code, _, err = run(capsys, "topology", "import", str(edges), "--out", str(tmp_path / "topo.json"))
    assert_one_line_error(code, err, expected)


def test_a_missing_edge_list_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "topology", "import", str(tmp_path / "absent.txt"), "--out", str(tmp_path / "t.json"))
    assert_one_line_error(code, err, "cannot read edge list")


def test_show_summarizes_a_topology(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "topo.json"
    argv = ("topology", "generate", "star", "--n", "6", "--run-id", "star-run", "--rounds", "9", "--out", str(out))
    assert run(capsys, *argv)[0] == 0
    code, stdout, _ = run(capsys, "topology", "show", str(out))
    assert code == 0
    cells = [[cell.strip() for cell in line.split("│")[1:3]] for line in stdout.splitlines() if "│" in line]
    lines = dict(cells)
    assert lines["run id"] == "star-run"
    assert lines["nodes"] == "6"
    assert lines["edges"] == "5"
    assert lines["degree min / max"] == "1 / 5"
    assert lines["rounds"] == "9"
    assert float(lines["spectral gap"]) == pytest.approx(load_topology(out).spectral_gap, rel=1e-5)
    assert lines["MSE bound 3 sigma^2 / n"] == "0.5"


def test_show_of_a_bad_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "topo.json"
    bad.write_text('{"run_id": "x"}')
    code, _, err = run(capsys, "topology", "show", str(bad))
    assert_one_line_error(code, err, "Field required")


def test_generate_an_async_topology_and_show_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.json"
    argv = ("topology", "generate", "ring", "--n", "8", "--protocol", "muffliato-async", "--exchanges", "200",
            "--sigma", "0", "--sensitivity", "1000", "--out", str(out))
    assert run(capsys, *argv)[0] == 0
    protocol = load_topology(out).protocol
    assert protocol.model_dump() == {
        "name": "muffliato-async", "sigma": 0.0, "sensitivity": 1000.0, "alpha": 2.0, "dimension": 1,
        "exchanges": 200, "duration_s": None, "tick_rate": 20.0, "activation": "weights", "exchange_timeout_s": 2.0,
    }
    code, stdout, _ = run(capsys, "topology", "show", str(out))
    assert code == 0
    cells = dict([cell.strip() for cell in line.split("│")[1:3]] for line in stdout.splitlines() if "│" in line)
    assert cells["protocol"] == "muffliato-async" and cells["exchanges"] == "200" and cells["tick_rate"] == "20.0"
    assert "rounds" not in cells and "duration_s" not in cells


def test_every_async_option_reaches_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.json"
    argv = ("topology", "generate", "complete", "--n", "4", "--protocol", "muffliato-async", "--duration", "2.5",
            "--tick-rate", "50", "--activation", "uniform", "--exchange-timeout", "0.5", "--dimension", "3",
            "--out", str(out))
    assert run(capsys, *argv)[0] == 0
    protocol = load_topology(out).protocol
    assert (protocol.duration_s, protocol.exchanges, protocol.tick_rate) == (2.5, None, 50.0)
    assert (protocol.activation, protocol.exchange_timeout_s, protocol.dimension) == ("uniform", 0.5, 3)


def test_import_takes_a_protocol_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    out = tmp_path / "t.json"
    argv = ("topology", "import", str(edges), "--protocol", "muffliato-async", "--exchanges", "5", "--out", str(out))
    assert run(capsys, *argv)[0] == 0
    assert load_topology(out).protocol.name == "muffliato-async"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("--protocol", "muffliato-async", "--exchanges", "5", "--rounds", "3"),
         "--rounds is not an option of protocol muffliato-async"),
        (("--protocol", "muffliato-async", "--exchanges", "5", "--plain"),
         "--plain is not an option of protocol muffliato-async"),
        (("--rounds", "3", "--exchanges", "5"), "--exchanges is not an option of protocol muffliato (it takes"),
        (("--protocol", "muffliato", "--rounds", "3", "--tick-rate", "5"),
         "--tick-rate is not an option of protocol muffliato"),
        (("--protocol", "muffliato-async",), "give exactly one of 'exchanges' (ticks per node) and 'duration_s'"),
        (("--protocol", "muffliato-async", "--exchanges", "5", "--duration", "1"), "give exactly one of"),
        (("--protocol", "muffliato-async", "--exchanges", "0"), "argument --exchanges"),
    ],
)
def test_options_of_another_protocol_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "t.json"
    code, _, err = run(capsys, "topology", "generate", "ring", "--n", "5", *argv, "--out", str(out))
    assert_one_line_error(code, err, expected)
    assert not out.exists()


def test_help_marks_each_option_with_its_protocols(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["topology", "generate", "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("zero-sum- gd", "zero-sum-gd")  # wrapped at its hyphen
    assert "--rounds ROUNDS [decor, muffliato, secure-neighbourhood, zero-sum] gossip rounds T" in text
    assert "--tick-rate TICK_RATE [muffliato-async, personalized-cd] rate of each node's Poisson clock, per second " \
           "(default 20.0)" in text
    assert "--sigma SIGMA [decor, decor-gd, muffliato, muffliato-async, muffliato-gd, ring-sum, rw-sgd, " \
           "secure-neighbourhood, secure-neighbourhood-gd, walk-sum, zero-sum, zero-sum-gd] std of each Gaussian " \
           "noise draw" in text
    assert "--plain [muffliato, muffliato-gd] plain gossip" in text
    unwrapped = text.replace("neighbourhood- gd", "neighbourhood-gd")  # argparse wraps at the name's hyphen
    assert "--steps STEPS [decor-gd, muffliato-gd, rw-sgd, secure-neighbourhood-gd, walk-sum, zero-sum-gd] T: " \
           "gradient steps (learning)" in unwrapped
    assert "--cycles CYCLES [ring-histogram, ring-sum] K: times the token goes round the ring" in text
    assert "--learning-rate LEARNING_RATE [decor-gd, muffliato-gd, rw-sgd, secure-neighbourhood-gd, zero-sum-gd] " \
           "step size eta (default 0.5)" in unwrapped
    assert "--mask-ratio MASK_RATIO [secure-neighbourhood, secure-neighbourhood-gd] std of each pairwise mask" in \
        unwrapped
    assert "--sender {known,anonymous} [rw-sgd] known: a receiver learns which neighbour" in text
    assert "--schedule erdos_renyi --edge-probability 0.3" in text
