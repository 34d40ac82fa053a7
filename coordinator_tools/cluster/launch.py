"""Start one OS process per node address on this machine, watch them, collect what they wrote.

The launcher is not part of the protocol: nodes only talk to each other. It starts one
`netdp-node` process per address of the topology (hosting the one id published there, or
all of them with --nodes when several share it), shows progress read from the view logs,
optionally kills a node's process at a given round (fault injection), and gathers exit
codes and estimates into RUNDIR, whose layout does not depend on how ids were hosted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal, NoReturn, TypeVar

import numpy as np

from coordinator_tools.cluster.ports import check_ports_free
from coordinator_tools.cluster.round_timing import round_completions, round_timing
from node.agent_budget import BudgetRequest
from node.breaks import Breaks
from node.data import node_data_file
from node.errors import ConfigError, LogFormatError
from node.host import ESTIMATE_FILE
from node.idset import describe_nodes, format_ids
from node.mailboxes.token_slot import KEPT, RECEIVED
from node.noise import node_seed
from node.protocols.registry import protocol_spec
from node.runtime import shared_loop_network
from node.security import CA_FILE, CERT_FILE, KEY_FILE
from node.topology import NetworkParams, Topology, hosted_ids, load_topology, save_topology
from node.viewlog import VIEW_LOG_NAME, LogContents, read_log

POLL_INTERVAL_S = 0.2
STDERR_FILE = "stderr.txt"
RUN_SUMMARY_FILE = "run.json"
TOPOLOGY_FILE = "topology.json"
MIN_CANARIES = 2  # the one-run audit guesses at least one canary each way
# Start-up allowance of the node processes (imports, keys, logs opened), apart from the run's own limit: a loaded
# machine starts many Python processes slowly, and that is no sign of a protocol stuck.
STARTUP_ALLOWANCE_S = 60.0
STARTUP_ALLOWANCE_PER_PROCESS_S = 5.0
Flag = TypeVar("Flag")  # the value of a per-node process option


@dataclass(frozen=True)
class NodeResult:
    node_id: int
    exit_code: int | None
    killed_by_request: bool
    rounds_started: int
    estimate: np.ndarray | None
    stderr_tail: str
    started_unix: float | None = None  # from its view log's header
    round_done_unix: Mapping[int, float] = field(default_factory=dict)  # round -> its last record of it (unix s)

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.estimate is not None


@dataclass(frozen=True)
class Overrun:
    """The limit a run went past, and the flag that sets it: the node processes' start-up or the run itself."""

    phase: Literal["startup", "run"]
    limit_s: float
    processes_up: int = 0
    processes: int = 0

    @property
    def flag(self) -> str:
        return "--startup-timeout" if self.phase == "startup" else "--timeout"

    def describe(self) -> str:
        """What went past which limit, and how to give it more time, in one line."""
        if self.phase == "startup":
            return (f"{self.processes_up} of {self.processes} node processes had started after {self.limit_s:g} s, the "
                    f"start-up allowance (a loaded machine starts them slowly: raise it with {self.flag} SECONDS)")
        return (f"the cluster did not finish within {self.limit_s:g} s of its processes starting, the run's limit "
                f"(raise it with {self.flag} SECONDS)")


@dataclass(frozen=True)
class LaunchProgress:
    """What a progress display shows: node processes up (their logs opened) and local steps started per node."""

    steps: dict[int, int]
    processes_up: int
    processes: int


@dataclass
class ClusterResult:
    rundir: Path
    topology: Topology
    nodes: list[NodeResult] = field(default_factory=list)
    overrun: Overrun | None = None
    interrupted: bool = False  # stopped by Ctrl-C or SIGTERM before its nodes were done

    @property
    def timed_out(self) -> bool:
        return self.overrun is not None

    @property
    def failures(self) -> list[NodeResult]:
        """Nodes that did not finish, except those killed on purpose."""
        return [r for r in self.nodes if not r.succeeded and not r.killed_by_request]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.timed_out

    def estimates(self) -> dict[int, np.ndarray]:
        return {r.node_id: r.estimate for r in self.nodes if r.estimate is not None}


@dataclass(frozen=True)
class LaunchOptions:
    sampler: str = "secure"
    simulation_seed: int | None = None  # master seed; each node gets its own derived seed
    certs_dir: Path | None = None  # None: plain text (explicitly insecure)
    # node -> local step at whose start its process is SIGKILLed (with every other id that process hosts)
    kill_at_round: Mapping[int, int] = field(default_factory=dict)
    lost_reply_fraction: float = 0.0  # fault injection: share of call replies every node loses
    # fault injection: node -> share of the acknowledgements of the deliveries it receives that it loses
    # (the same share for every id one process hosts)
    lost_ack_fraction: Mapping[int, float] = field(default_factory=dict)
    # fault injection: node -> factor its Poisson clock ticks faster than published (the same for every id of a process)
    clock_speedup: Mapping[int, float] = field(default_factory=dict)
    # personalized CD: node -> its own budget, at most the published one (the same for every id of a process)
    budgets: Mapping[int, BudgetRequest] = field(default_factory=dict)
    timeout_s: float | None = None  # the run's limit, counted once every node process is up (None: default_timeout)
    startup_timeout_s: float | None = None  # the processes' start-up allowance (None: default_startup_allowance)
    # an audit run: canary coordinates every node plants (node.canaries), published in RUNDIR's topology
    canaries: int = 0
    # negative controls: node -> its deliberate bugs (node.breaks; the same for every id of a process)
    breaks: Mapping[int, Breaks] = field(default_factory=dict)


def node_log_dir(rundir: Path, node_id: int) -> Path:
    return Path(rundir) / f"node-{node_id}"


def prepare_rundir(topology_path: Path, rundir: Path, *, canaries: int = 0) -> Topology:
    """Create RUNDIR with the topology actually used (publishing `canaries` for an audit run); refuse to mix
    two runs in one folder."""
    topology = with_canaries(load_topology(topology_path), canaries)
    rundir = Path(rundir)
    if rundir.exists() and any(rundir.iterdir()):
        raise ConfigError(f"{rundir} is not empty; choose a new --out folder for each run")
    rundir.mkdir(parents=True, exist_ok=True)
    save_topology(topology, rundir / TOPOLOGY_FILE)
    return topology


def with_canaries(topology: Topology, canaries: int) -> Topology:
    """The topology of an audit run whose nodes plant `canaries` canary coordinates (unchanged for 0)."""
    if canaries == 0:
        return topology
    params = topology.protocol
    if "canaries" not in type(params).model_fields:
        raise ConfigError(f"--canaries: {params.name} has no vector coordinates a canary could ride on")
    if canaries < MIN_CANARIES:
        raise ConfigError(f"--canaries {canaries}: an audit needs at least {MIN_CANARIES} canaries to guess")
    document = topology.model_dump()
    document["protocol"]["canaries"] = canaries
    return Topology.model_validate(document)


def node_simulation_seed(options: LaunchOptions, node_id: int) -> int | None:
    """The seed of node_id's simulation sampler, derived from the master seed (None: no seed to pass)."""
    if options.sampler != "simulation" or options.simulation_seed is None:
        return None
    return node_seed(options.simulation_seed, node_id)


def node_command(rundir: Path, node_id: int, data_file: Path, options: LaunchOptions, *,
                 resume: bool = False) -> list[str]:
    """The command line of a process hosting one node id; `resume`: a restart that rejoins the run in RUNDIR."""
    seed = node_simulation_seed(options, node_id)
    return [
        sys.executable, "-m", "node.cli",
        "--topology", str(Path(rundir) / TOPOLOGY_FILE),
        "--id", str(node_id),
        "--data", str(data_file),
        "--log-dir", str(node_log_dir(rundir, node_id)),
        "--sampler", options.sampler,
        *([] if seed is None else ["--sim-seed", str(seed)]),
        *(["--resume"] if resume else []),
        *_process_options((node_id,), options),
    ]


def hosting_command(rundir: Path, node_ids: tuple[int, ...], data_dir: Path, options: LaunchOptions) -> list[str]:
    """The command line of a process hosting several node ids (they derive their seeds from the master seed)."""
    seeded = options.sampler == "simulation" and options.simulation_seed is not None
    return [
        sys.executable, "-m", "node.cli",
        "--topology", str(Path(rundir) / TOPOLOGY_FILE),
        "--nodes", format_ids(node_ids),
        "--data", str(data_dir),
        "--log-dir", str(rundir),
        "--sampler", options.sampler,
        *(["--sim-seed", str(options.simulation_seed)] if seeded else []),
        *_process_options(node_ids, options),
    ]


def _process_options(node_ids: tuple[int, ...], options: LaunchOptions) -> list[str]:
    """Fault injection and TLS options of the process hosting `node_ids`."""
    command: list[str] = []
    breaks = options.breaks.get(node_ids[0])
    if breaks is not None:
        command += [argument for spec in breaks.specs() for argument in ("--break", spec)]
    kill_steps = [options.kill_at_round[v] for v in node_ids if v in options.kill_at_round]
    if kill_steps:
        command += ["--fault-kill-at-step", str(min(kill_steps))]
    if options.lost_reply_fraction:
        command += ["--fault-lose-replies", str(options.lost_reply_fraction)]
    lost_acks = options.lost_ack_fraction.get(node_ids[0])
    if lost_acks:
        command += ["--fault-lose-acks", str(lost_acks)]
    speedup = options.clock_speedup.get(node_ids[0])
    if speedup:
        command += ["--fault-clock-speedup", str(speedup)]
    budget = options.budgets.get(node_ids[0])
    if budget is not None:
        command += ["--budget", str(budget.epsilon) + ("" if budget.delta is None else f",{budget.delta}")]
    if options.certs_dir is None:
        command.append("--insecure")
    else:
        command += ["--tls-dir", str(Path(options.certs_dir) / f"node-{node_ids[0]}")]
    return command


def start_node_process(rundir: Path, node_id: int, data_file: Path, options: LaunchOptions) -> subprocess.Popen:
    """Start one `netdp-node` process for one id; its messages go to RUNDIR/node-<id>/stderr.txt."""
    return _start(node_command(rundir, node_id, data_file, options), node_log_dir(rundir, node_id))


def start_hosting_process(rundir: Path, node_ids: tuple[int, ...], data_dir: Path,
                          options: LaunchOptions) -> subprocess.Popen:
    """Start one `netdp-node --nodes` process; its messages go to RUNDIR/node-<lowest id>/stderr.txt."""
    return _start(hosting_command(rundir, node_ids, data_dir, options), node_log_dir(rundir, node_ids[0]))


def _start(command: list[str], log_dir: Path) -> subprocess.Popen:
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / STDERR_FILE, "wb") as stderr:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def default_timeout(topology: Topology, network: NetworkParams | None = None) -> float:
    """How long a run may take before the launcher stops it: startup, the protocol's worst case, a margin."""
    network = network or shared_loop_network(topology.network, max(map(len, hosted_ids(topology))))
    return network.startup_deadline_s + topology.protocol.worst_case_duration_s(network, topology.n) + 30.0


def default_startup_allowance(processes: int) -> float:
    """How long the node processes may take to come up: a fixed allowance and a few seconds per process."""
    return STARTUP_ALLOWANCE_S + STARTUP_ALLOWANCE_PER_PROCESS_S * processes


def logged_rounds(log_dir: Path) -> tuple[int, bool]:
    """(local steps the node has started, finished?) read from its view log so far.

    A step is a round it sent (synchronous gossip), an exchange it proposed (asynchronous), a
    token hop it took (token walks) or an update it started (personalized CD: its `step_inputs`
    record, logged in private and non-private runs alike).
    """
    contents = _view_log(log_dir)
    return (0, False) if contents is None else _steps(contents)


def _view_log(log_dir: Path) -> LogContents | None:
    """A node's view log as far as it is readable, or None when there is none yet or it is no log."""
    path = Path(log_dir) / VIEW_LOG_NAME
    if not path.exists():
        return None
    try:
        return read_log(path)
    except LogFormatError:
        return None


def _steps(contents: LogContents) -> tuple[int, bool]:
    """`logged_rounds` of a log already read."""
    rounds = {record.round for record in contents.of_kind("sent") if not record.kind}
    proposals = sum(1 for event in contents.of_kind("exchange") if event.phase == "proposed")
    hops = sum(1 for event in contents.of_kind("token") if event.phase in (RECEIVED, KEPT))
    updates = len(contents.of_kind("step_inputs"))
    return len(rounds) + proposals + hops + updates, bool(contents.of_kind("final_output"))


ProgressCallback = Callable[[LaunchProgress], None]


def check_launch_inputs(topology: Topology, data_dir: Path, options: LaunchOptions) -> dict[int, Path]:
    """Every node's data file, once the inputs of a run are known to be usable; a one-line ConfigError otherwise.

    Checked before any process starts, so that a typo fails at once instead of after a whole run.
    """
    strays = sorted(set(options.kill_at_round) - set(range(topology.n)))
    if strays:
        raise ConfigError(f"--kill names node {strays[0]}, but the topology's nodes are 0..{topology.n - 1}")
    _check_per_process_option(topology, options.lost_ack_fraction, "the share of lost acknowledgements",
                         lambda share: 0.0 <= share <= 1.0, "in 0..1", 0.0)
    _check_per_process_option(topology, options.clock_speedup, "the clock speedup",
                         lambda factor: 0.0 < factor < np.inf, "a finite factor > 0", 1.0)
    _check_per_process_option(topology, options.budgets, "an agent's own budget", lambda budget: budget.epsilon > 0.0,
                         "a budget with epsilon > 0", None)
    _check_per_process_option(topology, options.breaks, "a deliberate break (--break)", lambda breaks: True, "", None)
    with_canaries(topology, options.canaries)
    if options.certs_dir is not None:
        for v in range(topology.n):
            folder = Path(options.certs_dir) / f"node-{v}"
            missing = [name for name in (CA_FILE, CERT_FILE, KEY_FILE) if not (folder / name).is_file()]
            if missing:
                lacks = "no certificate folder" if not folder.is_dir() else f"no {missing[0]} in {folder}"
                raise ConfigError(f"{options.certs_dir} has {lacks} for node {v}; "
                                  "make the certificates of this topology with `netdp certs TOPOLOGY --out DIR`")
    data_files = {v: node_data_file(data_dir, v) for v in range(topology.n)}
    load = protocol_spec(topology.protocol.name).load
    for path in data_files.values():
        load(path, topology.protocol)
    return data_files


def _check_per_process_option(topology: Topology, values: Mapping[int, Flag], what: str, valid: Callable[[Flag], bool],
                         expected: str, unset: Flag | None) -> None:
    """A per-node process option (a fault injection, an agent's own budget) names nodes of the topology, with
    valid values, one per process (it is one command-line flag)."""
    strays = sorted(set(values) - set(range(topology.n)))
    if strays:
        raise ConfigError(f"{what} is set for node {strays[0]}, but the topology's nodes are 0..{topology.n - 1}")
    bad = {v: value for v, value in values.items() if not valid(value)}
    if bad:
        raise ConfigError(f"{what} of node {min(bad)} is {bad[min(bad)]}, not {expected}")
    for node_ids in hosted_ids(topology):
        if len({values.get(v, unset) for v in node_ids}) > 1:
            raise ConfigError(f"{what}: {describe_nodes(node_ids)} share one process, so they need the same value")


def run_cluster(topology_path: Path, data_dir: Path, rundir: Path, options: LaunchOptions = LaunchOptions(),
                on_progress: ProgressCallback | None = None) -> ClusterResult:
    """Run one process per address (its node ids) until all exit (or a limit passes), then collect.

    The processes first get their start-up allowance to come up (each opens its view log); the run's own limit
    counts from when the last one did, so a slow start is told apart from a stuck run.
    """
    topology = load_topology(topology_path)
    data_files = check_launch_inputs(topology, data_dir, options)
    check_ports_free(topology.address_of(node_ids[0]) for node_ids in hosted_ids(topology))
    topology = prepare_rundir(topology_path, rundir, canaries=options.canaries)
    processes: dict[tuple[int, ...], subprocess.Popen] = {}
    groups = hosted_ids(topology)
    startup_s = options.startup_timeout_s or default_startup_allowance(len(groups))
    run_s = options.timeout_s or default_timeout(topology)
    overrun = None
    interrupted = False
    with _sigterm_as_interrupt():
        try:
            for node_ids in groups:
                processes[node_ids] = (start_node_process(rundir, node_ids[0], data_files[node_ids[0]], options)
                                       if len(node_ids) == 1 else
                                       start_hosting_process(rundir, node_ids, Path(data_dir), options))
            started = time.monotonic()
            run_deadline: float | None = None
            while any(p.poll() is None for p in processes.values()):
                up = sum(1 for node_ids, p in processes.items() if p.poll() is not None or _is_up(rundir, node_ids))
                if on_progress:
                    on_progress(LaunchProgress({v: logged_rounds(node_log_dir(rundir, v))[0]
                                                for v in range(topology.n)}, up, len(processes)))
                now = time.monotonic()
                if run_deadline is None and up == len(processes):
                    run_deadline = now + run_s
                if run_deadline is None and now > started + startup_s:
                    overrun = Overrun("startup", startup_s, up, len(processes))
                    break
                if run_deadline is not None and now > run_deadline:
                    overrun = Overrun("run", run_s, up, len(processes))
                    break
                time.sleep(POLL_INTERVAL_S)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the nodes are stopped and the run summed up all the same
            interrupted = True
        finally:
            _stop_all(processes)
    result = ClusterResult(Path(rundir), topology, overrun=overrun, interrupted=interrupted)
    for node_ids, process in processes.items():
        killed = process.returncode == -signal.SIGKILL and any(v in options.kill_at_round for v in node_ids)
        stderr_path = node_log_dir(rundir, node_ids[0]) / STDERR_FILE
        result.nodes += [_collect(rundir, v, process.returncode, killed, stderr_path) for v in node_ids]
    result.nodes.sort(key=lambda r: r.node_id)
    _write_summary(result, options)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _is_up(rundir: Path, node_ids: tuple[int, ...]) -> bool:
    """Whether the process hosting `node_ids` has come up: its first id's view log is open."""
    return (node_log_dir(rundir, node_ids[0]) / VIEW_LOG_NAME).exists()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a run as Ctrl-C does: its node processes are stopped and run.json is written (a handler can
    only be installed from the main thread; elsewhere SIGTERM keeps its default)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


def _stop_all(processes: Mapping[tuple[int, ...], subprocess.Popen]) -> None:
    """Terminate whatever still runs (timeout or interruption), then make sure it is gone."""
    for process in processes.values():
        if process.poll() is None:
            process.terminate()
    for process in processes.values():
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _collect(rundir: Path, node_id: int, exit_code: int | None, killed: bool,
             stderr_path: Path | None = None) -> NodeResult:
    """What node `node_id` left in RUNDIR; `stderr_path`: its process's messages, if not in its own folder."""
    log_dir = node_log_dir(rundir, node_id)
    estimate = None
    estimate_path = log_dir / ESTIMATE_FILE
    if estimate_path.exists():
        estimate = np.asarray(json.loads(estimate_path.read_text())["value"], dtype=np.float64)
    stderr_path = stderr_path or log_dir / STDERR_FILE
    stderr_lines = stderr_path.read_text(errors="replace").strip().splitlines() if stderr_path.exists() else []
    tail = "\n".join(line for line in stderr_lines[-3:] if "WARNING: running WITHOUT TLS" not in line)
    contents = _view_log(log_dir)  # read once: steps started and round times
    if contents is None:
        return NodeResult(node_id, exit_code, killed, 0, estimate, tail)
    started = contents.header.started_unix if contents.header is not None else None
    return NodeResult(node_id, exit_code, killed, _steps(contents)[0], estimate, tail, started,
                      round_completions(contents))


def _write_summary(result: ClusterResult, options: LaunchOptions) -> None:
    summary = {
        "run_id": result.topology.run_id,
        "n": result.topology.n,
        "sampler": options.sampler,
        "tls": options.certs_dir is not None,
        "timed_out": result.timed_out,
        "timeout": None if result.overrun is None else {"phase": result.overrun.phase,
                                                        "limit_s": result.overrun.limit_s},
        "interrupted": result.interrupted,
        "nodes": [
            {"id": r.node_id, "exit_code": r.exit_code, "killed_by_request": r.killed_by_request,
             "rounds_started": r.rounds_started, "finished": r.estimate is not None}
            for r in result.nodes
        ],
        "round_timing": round_timing([r.started_unix for r in result.nodes if r.started_unix],
                                     [r.round_done_unix for r in result.nodes]),
    }
    (Path(result.rundir) / RUN_SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

