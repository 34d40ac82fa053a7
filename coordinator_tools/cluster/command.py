"""`netdp run`: a local cluster of real node processes, with live progress.

Progress shows the node processes coming up, then the local steps they start: as live bars on a
terminal, and as plain lines (each change of the processes up, the steps every few seconds) when the
output goes to a file or a pipe, where a live display would show nothing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from coordinator_tools.arguments import positive
from coordinator_tools.cluster.launch import (
    STARTUP_ALLOWANCE_PER_PROCESS_S,
    STARTUP_ALLOWANCE_S,
    ClusterResult,
    LaunchOptions,
    LaunchProgress,
    run_cluster,
)
from coordinator_tools.cluster.virtual import refuse_process_options, run_virtual
from coordinator_tools.experiment import add_experiment_argument
from node.breaks import Breaks
from node.errors import ConfigError, NetdpError
from node.topology import load_topology

CONSOLE = Console(stderr=True)
PLAIN_PROGRESS_EVERY_S = 10.0  # how often plain progress lines report the steps


def parse_kill(spec: str) -> tuple[int, int]:
    """'NODE@ROUND' -> (node, round)."""
    node, sep, round_index = spec.partition("@")
    if not sep or not node.isdigit() or not round_index.isdigit():
        raise argparse.ArgumentTypeError(f"expected NODE@ROUND, e.g. 3@2, got {spec!r}")
    return int(node), int(round_index)


def _steps_per_node(protocol: BaseModel) -> int | None:
    """Local steps every node makes when the protocol fixes their number (rounds, exchanges, or wake-ups or updates);
    else None."""
    return (getattr(protocol, "rounds", None) or getattr(protocol, "exchanges", None)
            or getattr(protocol, "wakeups", None) or getattr(protocol, "updates", None))


def launch_with_progress(topology_path: Path, data_dir: Path, rundir: Path, options: LaunchOptions,
                         runner: Callable[..., ClusterResult] = run_cluster) -> ClusterResult:
    """run_cluster (or `runner`: virtual.run_virtual) showing the node processes coming up, then the local steps
    started over all nodes: live bars on a terminal, plain lines otherwise.

    Nothing shows before the nodes start, so that a refused input is the only thing printed.
    """
    topology = load_topology(topology_path)
    steps = _steps_per_node(topology.protocol)
    total = None if steps is None else topology.n * steps
    display = LiveProgress(total) if CONSOLE.is_terminal else PlainProgress(total)
    try:
        return runner(topology_path, data_dir, rundir, options, on_progress=display.show)
    finally:
        display.close()


class LiveProgress:
    """Two bars on a terminal: node processes up, then local steps started."""

    def __init__(self, total_steps: int | None) -> None:
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=CONSOLE, transient=True)
        self.total_steps = total_steps
        self.processes: TaskID | None = None
        self.steps: TaskID | None = None

    def show(self, state: LaunchProgress) -> None:
        self.progress.start()  # once; later calls return at once
        if self.processes is None:
            self.processes = self.progress.add_task("node processes up", total=state.processes)
            self.steps = self.progress.add_task("local steps", total=self.total_steps)
        self.progress.update(self.processes, completed=state.processes_up)
        assert self.steps is not None
        self.progress.update(self.steps, completed=sum(state.steps.values()))

    def close(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


class PlainProgress:
    """Plain lines for a log file or a pipe: each change of the processes up, then the steps every few seconds."""

    def __init__(self, total_steps: int | None) -> None:
        self.total_steps = total_steps
        self.shown_up = -1
        self.shown_at = -PLAIN_PROGRESS_EVERY_S
        self.started = time.monotonic()

    def show(self, state: LaunchProgress) -> None:
        elapsed = time.monotonic() - self.started
        if state.processes_up != self.shown_up:
            self.shown_up = state.processes_up
            CONSOLE.print(f"node processes up: {state.processes_up}/{state.processes} ({elapsed:.0f} s)",
                          highlight=False)
        done = sum(state.steps.values())
        if done and elapsed - self.shown_at >= PLAIN_PROGRESS_EVERY_S:
            self.shown_at = elapsed
            of = "" if self.total_steps is None else f"/{self.total_steps}"
            CONSOLE.print(f"local steps started: {done}{of} ({elapsed:.0f} s)", highlight=False)

    def close(self) -> None:
        return None


def report_failures(result: ClusterResult) -> None:
    """Raise a clear error naming every node that failed, with its last words."""
    if result.overrun is not None:
        raise NetdpError(f"{result.overrun.describe()}; logs are in {result.rundir}")
    if result.failures:
        lines = [f"node {r.node_id} exited with code {r.exit_code}: {r.stderr_tail or '(no message)'}"
                 for r in result.failures]
        raise NetdpError(f"{len(lines)} node(s) failed; logs are in {result.rundir}\n  " + "\n  ".join(lines))


def parse_break(spec: str) -> tuple[int, str]:
    """'NODE:SPEC' -> (node, spec); the spec itself is checked by `node.breaks.Breaks.parsed`."""
    node, sep, what = spec.partition(":")
    if not sep or not node.isdigit() or not what:
        raise argparse.ArgumentTypeError(f"expected NODE:SPEC, e.g. 3:noise-scale=0.25, got {spec!r}")
    return int(node), what


def options_from_args(args: argparse.Namespace) -> LaunchOptions:
    if args.seed is not None and args.sampler != "simulation":
        raise ConfigError("--seed only goes with --sampler simulation")
    specs: dict[int, list[str]] = {}
    for node, spec in args.breaks or ():
        specs.setdefault(node, []).append(spec)
    return LaunchOptions(
        sampler=args.sampler,
        simulation_seed=args.seed,
        certs_dir=None if args.insecure else args.certs,
        kill_at_round=dict(args.kill or ()),
        timeout_s=args.timeout,
        startup_timeout_s=args.startup_timeout,
        canaries=args.canaries,
        breaks={node: Breaks.parsed(given) for node, given in specs.items()},
    )


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by `netdp run` and `netdp demo`."""
    parser.add_argument("--sampler", choices=("secure", "simulation"), default="secure",
                        help="noise sampler of every node (default: secure)")
    parser.add_argument("--seed", "--sim-seed", type=int, default=None, dest="seed",
                        help="master seed of the simulation sampler (each node derives its own; never logged)")
    security = parser.add_mutually_exclusive_group()
    security.add_argument("--certs", type=Path, help="certificates from `netdp certs` (mutual TLS)")
    security.add_argument("--insecure", action="store_true", help="plain-text gRPC (local demos only)")
    parser.add_argument("--kill", type=parse_kill, action="append", metavar="NODE@ROUND",
                        help="fault injection: SIGKILL NODE's process (with every id it hosts) as the first "
                             "id it hosts starts ROUND (repeatable)")
    parser.add_argument("--timeout", type=positive, default=None, metavar="SECONDS",
                        help="give up when the run has not finished this many seconds after its node processes "
                             "started (default: the protocol's worst case, plus the peers' start-up deadline and "
                             "30 s)")
    parser.add_argument("--startup-timeout", type=positive, default=None, metavar="SECONDS",
                        help="give up when the node processes have not all started (opened their logs) after this "
                             f"many seconds (default {STARTUP_ALLOWANCE_S:g} + {STARTUP_ALLOWANCE_PER_PROCESS_S:g} "
                             "per process)")
    parser.add_argument("--canaries", type=int, default=0, metavar="M",
                        help="an audit run: every node plants M secret canaries (fair coins, logged privately) in M "
                             "coordinates appended to its vectors, so that `netdp audit` tests the real run "
                             "(its empirical column); RUNDIR's topology publishes M")
    parser.add_argument("--break", type=parse_break, action="append", dest="breaks", metavar="NODE:SPEC",
                        help="negative control for tests and demonstrations: NODE deliberately breaks privacy, "
                             "SPEC one of noise-scale=F (noise at F times the published scale), skip-clip (no "
                             "clipping), leak-raw (its contribution sent once more before any noise); repeatable")


def _run_command(args: argparse.Namespace) -> int:
    if args.certs is None and not args.insecure and not args.virtual:
        raise ConfigError("pass --certs DIR (from `netdp certs`) or --insecure for a plain-text local run")
    options = options_from_args(args)
    if args.virtual:  # every node in this process: no TLS to choose, process-only options refused
        refuse_process_options(options)
    result = launch_with_progress(args.topology, args.data, args.out, options,
                                  runner=run_virtual if args.virtual else run_cluster)
    report_failures(result)
    finished = sum(1 for r in result.nodes if r.succeeded)
    CONSOLE.print(f"{finished}/{result.topology.n} nodes finished; logs and estimates in {result.rundir}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run", help="run a local cluster: one node process per topology address, on loopback",
        description="Run a local cluster on loopback: one `netdp-node` process per address of TOPOLOGY, hosting "
                    "the node ids published there (one, or several behind one gRPC server: see `netdp topology "
                    "generate --ids-per-process`). RUNDIR gets node-<id>/ per id whatever the hosting.")
    run.add_argument("topology", type=Path, help="published topology (addresses on this machine)")
    run.add_argument("--data", type=Path, required=True, help="folder with node-<id>.json (or .npy/.npz/.csv) files")
    run.add_argument("--out", type=Path, required=True, help="new folder for the run: topology, logs, estimates")
    add_launch_arguments(run)
    run.add_argument("--virtual", action="store_true",
                     help="run every node in this one process over the in-process transport (no TLS, no fault "
                          "injection; same protocol code, validation and logs)")
    add_experiment_argument(run)
    run.set_defaults(handler=_run_command)
