"""`netdp sweep`: run a grid of points, audit each, and write sweep.csv and the utility–ε figures.

The grid is checked whole (every point's graph, parameters and data) before anything runs. The
command resumes: on the same --out folder and grid it skips the finished points and runs the
others (see `state`). `sweep_grid` and `run_sweep` are the sweep as functions (the Python API
calls them); `register` adds the sub-command.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from coordinator_tools.cluster.command import CONSOLE
from coordinator_tools.experiment import add_experiment_argument
from coordinator_tools.sweep import figures
from coordinator_tools.sweep.grid import (
    SweepGrid,
    expand,
    grid_from,
    load_grid,
    supported,
)
from coordinator_tools.sweep.point import check_point, run_point
from coordinator_tools.sweep.rows import COLUMNS
from coordinator_tools.sweep.state import (
    CSV_FILE,
    SWEEP_FILE,
    check_folder,
    clear_point,
    point_folder,
    read_row,
    write_csv,
    write_row,
    write_sweep,
)
from node.errors import ConfigError, NetdpError

LIST_OPTIONS = ("protocol", "graph", "n", "sigma", "target_eps", "rounds", "steps")
VALUE_OPTIONS = ("delta", "dimension", "dataset", "seed", "networked", "insecure")


class SweepResult(NamedTuple):
    """What one call of `run_sweep` did: points run now, points found finished, failures by point id."""

    ran: int
    reused: int
    failures: dict[str, str]


def sweep_grid(fields: Mapping[str, object], grid_file: Path | None = None, *,
               source: str = "netdp sweep") -> SweepGrid:
    """The grid from a grid file, or from its fields (None: left out, at its default); not both.

    A ConfigError names the first problem and `source`, where the fields came from.
    """
    given = {name: value for name, value in fields.items() if value is not None}
    if grid_file is not None:
        if given:
            raise ConfigError(f"give --grid or the grid options, not both (--{next(iter(given)).replace('_', '-')})")
        return load_grid(grid_file)
    return grid_from(given, source)


def grid_of(args: argparse.Namespace) -> SweepGrid:
    """The grid from --grid FILE, or from the grid options (comma lists), the ones left out at their defaults."""
    fields = {name: getattr(args, name) for name in LIST_OPTIONS + VALUE_OPTIONS}
    return sweep_grid({name: value.split(",") if name in LIST_OPTIONS and value is not None else value
                       for name, value in fields.items()}, args.grid)


def run_sweep(grid: SweepGrid, out: Path) -> SweepResult:
    """Run the grid's unfinished points into `out` (a new folder, or one to resume) and write its CSV and figures."""
    points = expand(grid)
    check_folder(out, grid)
    with tempfile.TemporaryDirectory(prefix="netdp-sweep-") as scratch:
        for point in points:
            check_point(point, grid, Path(scratch) / point.id)
    out.mkdir(parents=True, exist_ok=True)
    failures: dict[str, str] = {}
    write_sweep(out, grid, points, failures)
    unfinished = [point for point in points if read_row(out, point.id) is None]
    progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=CONSOLE)
    with progress:
        task = progress.add_task("", total=len(points), completed=len(points) - len(unfinished))
        for point in unfinished:
            progress.update(task, description=point.id)
            clear_point(out, point.id)
            try:
                row = run_point(point, grid, point_folder(out, point.id))
            except NetdpError as exc:
                failures[point.id] = str(exc)
                progress.console.print(f"point {point.id} failed: {exc}")
            else:
                write_row(out, point.id, row)
            write_sweep(out, grid, points, failures)
            progress.advance(task)
        progress.update(task, description="")
    rows = [row.model_dump() for point in points if (row := read_row(out, point.id)) is not None]
    write_csv(out, rows, COLUMNS)
    figures.utility_figures(rows, out)
    return SweepResult(len(unfinished), len(points) - len(unfinished), failures)


def _sweep_command(args: argparse.Namespace) -> int:
    grid = grid_of(args)
    ran, reused, failures = run_sweep(grid, args.out)
    written = [path for name in (CSV_FILE, SWEEP_FILE, figures.MEAN_FIGURE, figures.WORST_FIGURE)
               if (path := args.out / name).exists()]
    CONSOLE.print(f"{ran} point(s) run, {reused} already finished, {len(failures)} failed; wrote "
                  f"{', '.join(map(str, written))}")
    if failures:
        CONSOLE.print(f"rerun the same command to retry the failed point(s): {', '.join(failures)}")
    return 1 if failures else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `netdp sweep` to the CLI."""
    parser = subparsers.add_parser(
        "sweep", help="privacy-utility sweep: a grid of runs, each audited, as a CSV and figures",
        description="Run every point of a grid (comma lists make the Cartesian product of protocol, graph, n, T "
        "and noise), audit each, and write DIR/sweep.csv (one row per point), DIR/sweep.json (the grid, every "
        "point's parameters, seeds and status), DIR/points/<id>/ (topology, data, run, audit) and the figures "
        "utility against mean and worst-pair exact eps, with the local-DP and central-DP baselines at the same "
        "noise. Rerunning the same command on DIR skips the finished points.")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="sweep folder (new, or to resume)")
    add_experiment_argument(parser)
    parser.add_argument("--grid", type=Path, metavar="FILE",
                        help="JSON grid file: an object with the fields protocol, graph, n, sigma, target_eps, "
                        "delta, rounds, steps, dimension, dataset, seed, networked, insecure (lists or single "
                        "values); instead of the options below")
    parser.add_argument("--protocol", metavar="LIST", help=f"protocols, comma-separated: {', '.join(supported())}")
    parser.add_argument("--graph", metavar="LIST", help="graph kinds, comma-separated (default hypercube)")
    parser.add_argument("--n", metavar="LIST",
                        help="numbers of nodes, comma-separated (default 16; a named graph fixes its own)")
    parser.add_argument("--sigma", metavar="LIST", help="noise std per draw, comma-separated")
    parser.add_argument("--target-eps", metavar="LIST",
                        help="or: target mean exact eps at --delta, comma-separated (sigma calibrated per point by "
                        "the planner, as `netdp plan --target-mean-eps`)")
    parser.add_argument("--delta", type=float, help="delta of every eps (default 1e-5)")
    parser.add_argument("--rounds", metavar="LIST",
                        help="T of the averaging protocols, comma-separated: muffliato's rounds (default T_stop), "
                        "muffliato-async's ticks per node (required)")
    parser.add_argument("--steps", metavar="LIST", help="gradient steps of muffliato-gd, comma-separated (default 10)")
    parser.add_argument("--dimension", type=int, help="length of every node's vector, averaging (default 1)")
    parser.add_argument("--dataset", help="muffliato-gd's bundled dataset: breast_cancer (default) or digits")
    parser.add_argument("--seed", type=int, help="base seed; every point's graph, data, noise and attack seeds "
                        "derive from it and are recorded (default 0)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--virtual", dest="networked", action="store_const", const=False, default=None,
                      help="every point's nodes in this process (the default)")
    mode.add_argument("--networked", dest="networked", action="store_const", const=True,
                      help="every point's nodes as real processes on loopback, mutual TLS (certificates made per "
                      "point) unless --insecure")
    parser.add_argument("--insecure", action="store_const", const=True, default=None,
                        help="networked points in plain text")
    parser.set_defaults(handler=_sweep_command)
