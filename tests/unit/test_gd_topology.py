"""`netdp topology generate | import --protocol muffliato-gd` and graphs drawn per step, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.topology import ErdosRenyiSchedule, Topology, erdos_renyi_edges, load_topology
from tests.unit.test_topology_cli import assert_one_line_error, run

GD = ("--protocol", "muffliato-gd", "--steps", "4", "--gossip-rounds", "2")
SGD = (*GD, "--batch", "2")  # a minibatch: Delta = 2C/b needs no --sensitivity
DRAWN = ("--schedule", "erdos_renyi", "--edge-probability", "0.3")


def generate_topology(capsys: pytest.CaptureFixture[str], out: Path, *argv: str) -> tuple[Topology, str]:
    code, stdout, err = run(capsys, "topology", "generate", *argv, "--out", str(out))
    assert code == 0, err
    return load_topology(out), stdout


def show_cells(stdout: str) -> dict[str, str]:
    return dict([cell.strip() for cell in line.split("│")[1:3]] for line in stdout.splitlines() if "│" in line)


def test_the_issue_command_publishes_every_gd_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology, _ = generate_topology(
        capsys, tmp_path / "f.json",
        *("florentine_families", "--protocol", "muffliato-gd", "--steps", "10", "--gossip-rounds", "1", "--plain"),
        *("--sigma", "1", "--sensitivity", "1", "--alpha", "2"),
    )
    assert topology.n == 15 and len(topology.edges) == 20 and topology.spectral_gap is not None
    assert topology.schedule.kind == "fixed"
    assert topology.protocol.model_dump() == {
        "name": "muffliato-gd", "sigma": 1.0, "sensitivity": 1.0, "alpha": 2.0, "dimension": 1,
        "task": "logistic", "steps": 10, "gossip_rounds": 1, "accelerated": False, "learning_rate": 0.5,
        "clip": 1.0, "batch": None, "adjacency": "example", "regularization": 0.0,
    }


def test_every_learning_option_reaches_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology, _ = generate_topology(
        capsys, tmp_path / "t.json", "ring", "--n", "6", *GD,
        *("--task", "least_squares", "--learning-rate", "0.1", "--clip", "2", "--batch", "8"),
        *("--regularization", "0.01", "--dimension", "5", "--sensitivity", "0.75"),
    )
    protocol = topology.protocol
    assert (protocol.task, protocol.learning_rate, protocol.clip, protocol.batch) == ("least_squares", 0.1, 2.0, 8)
    assert (protocol.regularization, protocol.dimension, protocol.sensitivity) == (0.01, 5, 0.75)
    assert not protocol.accelerated  # plain by default: the auditor unrolls plain rounds exactly


@pytest.mark.parametrize(
    ("argv", "sensitivity"),
    [
        (("--adjacency", "dataset"), 2.0),  # a whole dataset replaced: 2C
        (("--adjacency", "dataset", "--clip", "3", "--batch", "4"), 6.0),  # ... whatever the batch
        (("--batch", "4"), 0.5),  # one of b examples replaced: 2C/b
        (("--adjacency", "example", "--clip", "2", "--batch", "8"), 0.5),
    ],
)
def test_sensitivity_is_derived_from_clip_adjacency_and_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], sensitivity: float
) -> None:
    topology, _ = generate_topology(capsys, tmp_path / "t.json", "ring", "--n", "5", *GD, *argv)
    assert topology.protocol.sensitivity == pytest.approx(sensitivity)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), "replace-one adjacency with full-batch gradients needs --sensitivity or --batch"),
        (("--adjacency", "example", "--clip", "2"), "needs --sensitivity or --batch"),
        (("--batch", "2", "--sensitivity", "0.5"), "sensitivity 0.5 is below 1, the bound that clip 1 gives"),
        (("--gossip-rounds", "0", "--batch", "2"), "argument --gossip-rounds: Input should be greater than or equal"),
    ],
)
def test_bad_learning_parameters_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "t.json"
    code, _, err = run(capsys, "topology", "generate", "ring", "--n", "5", *GD, *argv, "--out", str(out))
    assert_one_line_error(code, err, expected)
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("argv", [(), ("--protocol", "muffliato-async", "--exchanges", "5")])
def test_averaging_still_defaults_sensitivity_to_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    topology, _ = generate_topology(capsys, tmp_path / "t.json", "ring", "--n", "5", *argv)
    assert topology.protocol.sensitivity == 1.0


@pytest.mark.parametrize(
    "flag",
    [("--steps", "3"), ("--gossip-rounds", "2"), ("--task", "logistic"), ("--learning-rate", "0.1"),
     ("--clip", "2"), ("--batch", "4"), ("--adjacency", "dataset"), ("--regularization", "0.1")],
)
def test_averaging_refuses_learning_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: tuple[str, str]
) -> None:
    for protocol in ("muffliato", "muffliato-async"):
        argv = ("ring", "--n", "5", "--protocol", protocol, *flag, "--out", str(tmp_path / "t.json"))
        code, _, err = run(capsys, "topology", "generate", *argv)
        assert_one_line_error(code, err, f"{flag[0]} is not an option of protocol {protocol} (it takes")


def test_a_drawn_schedule_round_trips_and_every_load_draws_the_same_step_graphs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "er.json"
    topology, _ = generate_topology(
        capsys, out, "complete", "--n", "16", *DRAWN, "--schedule-seed", "7", "--weighting", "min_degree", *SGD)
    assert topology.schedule == ErdosRenyiSchedule(p=0.3, seed=7)
    assert topology.edges == [] and topology.spectral_gap is None and topology.gamma is None
    assert topology.weighting == "min_degree" and topology.n == 16
    assert not topology.protocol.accelerated  # defaulted: a drawn graph has no spectral gap
    again = load_topology(out)
    assert again == topology
    steps = [[again.neighbours_at(v, step) for v in range(16)] for step in range(3)]
    assert steps == [[topology.neighbours_at(v, step) for v in range(16)] for step in range(3)]
    assert steps[0] != steps[1] != steps[2]
    # ... and are the published seed's graphs, whatever a node has cached
    for step, neighbours in enumerate(steps):
        expected: list[set[int]] = [set() for _ in range(16)]
        for u, v in erdos_renyi_edges(16, 0.3, 7, step):
            expected[u].add(v)
            expected[v].add(u)
        assert [set(peers) for peers in neighbours] == expected
    code, stdout, _ = run(capsys, "topology", "show", str(out))
    assert code == 0
    assert show_cells(stdout)["graph schedule"] == "G(n, p = 0.3) per step, seed 7"


def test_a_drawn_schedule_without_a_seed_gets_a_fresh_one_and_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = []
    for name in ("a.json", "b.json"):
        topology, stdout = generate_topology(capsys, tmp_path / name, "ring", "--n", "8", *DRAWN, *SGD)
        assert isinstance(topology.schedule, ErdosRenyiSchedule)
        assert show_cells(stdout)["graph schedule"].endswith(f"seed {topology.schedule.seed}")
        seeds.append(topology.schedule.seed)
    assert seeds[0] != seeds[1]


def test_an_edge_list_only_gives_a_drawn_schedule_its_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 3\n")
    out = tmp_path / "t.json"
    argv = ("topology", "import", str(edges), *DRAWN, *SGD, "--plain", "--out", str(out))
    assert run(capsys, *argv)[0] == 0
    topology = load_topology(out)
    assert topology.n == 4 and topology.edges == [] and topology.graph == "file:edges.txt"
    assert not topology.protocol.accelerated


def test_an_explicit_chebyshev_request_on_a_drawn_graph_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "er.json"
    generate_topology(capsys, out, "ring", "--n", "6", *DRAWN, *SGD)
    document = json.loads(out.read_text())
    document["protocol"]["accelerated"] = True
    out.write_text(json.dumps(document))
    code, _, err = run(capsys, "topology", "show", str(out))
    assert_one_line_error(code, err, "Chebyshev acceleration needs the spectral gap of a fixed undirected graph")
    params = MuffliatoGDParams.model_validate(document["protocol"])
    with pytest.raises(ValueError, match="use plain gossip") as caught:
        build_topology(generate("ring", n=6), graph_name="ring", run_id="er", protocol=params,
                       schedule=ErdosRenyiSchedule(p=0.3, seed=1))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (DRAWN, "protocol muffliato runs on undirected graphs; this graph is erdos-renyi (--schedule erdos_renyi)"),
        ((*DRAWN, "--rounds", "5"), "protocol muffliato runs on undirected graphs"),
        ((*DRAWN, "--protocol", "muffliato-async", "--exchanges", "5"),
         "protocol muffliato-async runs on undirected graphs"),
        (("--schedule", "erdos_renyi", *SGD), "--schedule erdos_renyi needs --edge-probability"),
        (("--edge-probability", "0.3", *SGD), "--edge-probability only goes with --schedule erdos_renyi"),
        (("--schedule-seed", "3", *SGD), "--schedule-seed only goes with --schedule erdos_renyi"),
        (("--schedule", "erdos_renyi", "--edge-probability", "1.5", *SGD), "--edge-probability: Input should be"),
        ((*DRAWN, "--schedule-seed", "-1", *SGD), "--schedule-seed: Input should be greater than or equal to 0"),
    ],
)
def test_bad_schedules_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "t.json"
    code, _, err = run(capsys, "topology", "generate", "ring", "--n", "6", *argv, "--out", str(out))
    assert_one_line_error(code, err, expected)
    assert not out.exists()


def test_explicit_weights_cannot_weigh_a_drawn_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edges = tmp_path / "weighted.txt"
    edges.write_text("0 1 0.5\n1 2 0.25\n")
    argv = ("topology", "import", str(edges), *DRAWN, *SGD, "--out", str(tmp_path / "t.json"))
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, "a graph drawn per step needs weighting 'metropolis' or 'min_degree'")


def test_decor_gd_takes_the_learning_options_and_its_pairwise_ratio(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    topology, _ = generate_topology(capsys, tmp_path / "d.json", "ring", "--n", "6", "--protocol", "decor-gd",
                                    "--steps", "4", "--batch", "2", "--sigma-cor-ratio", "3")
    protocol = topology.protocol
    assert (protocol.name, protocol.steps, protocol.gossip_rounds, protocol.sigma_cor_ratio) == ("decor-gd", 4, 1, 3.0)
    assert protocol.sensitivity == 1.0  # Delta = 2C/b from the clip 1 and the minibatch of 2, as Muffliato-GD's
