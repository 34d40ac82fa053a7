"""`netdp sweep`'s grid: validation before any run, and the expansion into points with their seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_tools.cli import build_parser
from coordinator_tools.sweep.command import grid_of
from coordinator_tools.sweep.grid import (
    DEFAULT_STEPS,
    expand,
    grid_from,
    load_grid,
    supported,
)
from coordinator_tools.sweep.point import point_topology
from node.errors import ConfigError


def sweep_grid(*argv: str):
    return grid_of(build_parser().parse_args(["sweep", "--out", "unused", *argv]))


def test_comma_lists_make_the_cartesian_product_with_one_t_axis_per_protocol() -> None:
    grid = sweep_grid("--protocol", "muffliato,muffliato-gd", "--graph", "hypercube,ring", "--n", "8",
                      "--sigma", "0.5,1,2", "--rounds", "3,5")
    points = expand(grid)
    # muffliato: 2 graphs x 2 rounds x 3 sigmas; muffliato-gd: 2 graphs x the default steps x 3 sigmas.
    assert len(points) == 12 + 6
    assert len({point.id for point in points}) == len(points)
    assert {point.length for point in points if point.protocol == "muffliato"} == {3, 5}
    assert {point.length for point in points if point.protocol == "muffliato-gd"} == {DEFAULT_STEPS}
    assert {point.sigma for point in points} == {0.5, 1.0, 2.0} and {p.target_eps for p in points} == {None}
    assert points[0].id == "muffliato_hypercube_n8_T3_sigma0.5"


def test_a_curve_shares_its_graph_and_one_size_shares_its_data_and_noise() -> None:
    grid = sweep_grid("--protocol", "muffliato", "--graph", "erdos_renyi,hypercube", "--n", "8,16",
                      "--sigma", "1,2", "--rounds", "2")
    points = expand(grid)
    curve = [point for point in points if (point.graph, point.n) == ("erdos_renyi", 8)]
    assert len(curve) == 2 and len({(p.graph_seed, p.data_seed) for p in curve}) == 1
    assert curve[0].graph_seed is not None
    assert {p.graph_seed for p in points if p.graph == "hypercube"} == {None}  # a deterministic kind
    assert len({p.graph_seed for p in points if p.graph == "erdos_renyi"}) == 2  # one per n
    for n in (8, 16):  # common random numbers: every point of one size draws the same data and noise
        assert len({(p.data_seed, p.noise_seed) for p in points if p.n == n}) == 1
    assert points[0].noise_seed != points[-1].noise_seed and points[0].data_seed != points[0].noise_seed
    assert len({p.attack_seed for p in points}) == len(points)
    assert expand(grid) == points  # derived, not drawn
    other = expand(sweep_grid("--protocol", "muffliato", "--graph", "erdos_renyi,hypercube", "--n", "8,16",
                              "--sigma", "1,2", "--rounds", "2", "--seed", "1"))
    assert all(a.noise_seed != b.noise_seed and a.data_seed != b.data_seed for a, b in zip(points, other))


def test_a_named_graph_fixes_its_own_size_and_the_target_axis_replaces_sigma() -> None:
    points = expand(sweep_grid("--protocol", "muffliato", "--graph", "karate_club", "--n", "8,16",
                               "--target-eps", "1,2"))
    assert [(p.n, p.length, p.sigma, p.target_eps) for p in points] == [(34, None, None, 1.0), (34, None, None, 2.0)]
    assert points[0].id == "muffliato_karate_club_n34_Tstop_eps1"


@pytest.mark.parametrize(("argv", "message"), [
    (("--protocol", "muffliato,rw-sgd", "--sigma", "1"),
     f"netdp sweep runs {', '.join(supported())}; not 'rw-sgd'"),
    (("--protocol", "muffliato", "--sigma", "1", "--target-eps", "2"), "exactly one of them"),
    (("--protocol", "muffliato"), "exactly one of them"),
    (("--protocol", "muffliato-async", "--sigma", "1"), "muffliato-async needs rounds"),
    (("--protocol", "muffliato-gd", "--sigma", "1", "--rounds", "2"),
     "decor-gd, muffliato-gd, secure-neighbourhood-gd, zero-sum-gd take steps"),
    (("--protocol", "muffliato", "--sigma", "1", "--steps", "2"), "the averaging protocols take rounds"),
    (("--protocol", "muffliato", "--sigma", "1", "--insecure"), "insecure only goes with networked runs"),
    (("--protocol", "muffliato", "--sigma", "1,2,1"), "sigma: lists 1.0 twice"),
    (("--protocol", "muffliato", "--sigma", "0"), "sigma: Input should be greater than 0, got '0'"),
    (("--protocol", "muffliato", "--sigma", "1", "--n", "1"), "n: Input should be greater than or equal to 2"),
    (("--protocol", "muffliato", "--sigma", "1", "--graph", "moebius"), "unknown graph kind 'moebius'"),
])  # fmt: skip
def test_a_bad_grid_is_one_line_naming_the_problem(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match="^netdp sweep: ") as raised:
        sweep_grid(*argv)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_grid_file_takes_the_same_fields_single_values_included(tmp_path: Path) -> None:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"protocol": "muffliato", "graph": ["ring"], "n": [8, 16], "sigma": 1,
                                "rounds": [4], "seed": 3}))
    assert load_grid(path) == sweep_grid("--protocol", "muffliato", "--graph", "ring", "--n", "8,16", "--sigma", "1",
                                         "--rounds", "4", "--seed", "3")
    path.write_text(json.dumps({"protocol": "muffliato", "sigma": 1, "rounds_per_node": 4}))
    with pytest.raises(ConfigError, match="grid.json: rounds_per_node: Extra inputs are not permitted"):
        load_grid(path)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        load_grid(path)
    with pytest.raises(ConfigError, match=r"give --grid or the grid options, not both \(--sigma\)"):
        grid_of(build_parser().parse_args(["sweep", "--out", "x", "--grid", str(path), "--sigma", "1"]))


def test_the_grid_round_trips_through_json() -> None:
    grid = grid_from({"protocol": ["muffliato"], "sigma": [1, 2], "rounds": 3}, "test")
    assert grid_from(grid.model_dump(mode="json"), "test") == grid


def test_every_learning_protocol_runs_as_itself_on_the_shared_learning_task() -> None:
    grid = sweep_grid("--protocol", "decor-gd,muffliato-gd,secure-neighbourhood-gd", "--graph", "ring", "--n", "4",
                      "--sigma", "1", "--steps", "3")
    protocols = {point.protocol: point_topology(point, grid, 1.0).protocol for point in expand(grid)}
    decor, gossip, masked = protocols["decor-gd"], protocols["muffliato-gd"], protocols["secure-neighbourhood-gd"]
    assert (decor.name, gossip.name, masked.name) == ("decor-gd", "muffliato-gd", "secure-neighbourhood-gd")
    shared = ("task", "clip", "batch", "steps", "learning_rate", "sensitivity", "sigma", "gossip_rounds")
    assert {f: getattr(decor, f) for f in shared} == {f: getattr(gossip, f) for f in shared}
    assert {f: getattr(masked, f) for f in shared} == {f: getattr(gossip, f) for f in shared}


def test_zero_sum_learning_runs_on_the_shared_learning_task_with_one_round_per_step() -> None:
    grid = sweep_grid("--protocol", "zero-sum-gd,muffliato-gd", "--graph", "ring", "--n", "4", "--sigma", "1",
                      "--steps", "3")
    protocols = {point.protocol: point_topology(point, grid, 1.0).protocol for point in expand(grid)}
    zero_sum, gossip = protocols["zero-sum-gd"], protocols["muffliato-gd"]
    shared = ("task", "clip", "batch", "steps", "learning_rate", "sensitivity", "sigma", "gossip_rounds")
    assert zero_sum.name == "zero-sum-gd" and gossip.gossip_rounds == 1
    assert {f: getattr(zero_sum, f) for f in shared} == {f: getattr(gossip, f) for f in shared}
