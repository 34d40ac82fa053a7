"""`netdp run --virtual`: every node of a topology in this one process, over the in-process transport.

What stays the same as a networked run (`launch.run_cluster`): the inputs are checked the
same way, RUNDIR holds the same topology.json, node-<id>/view.log, private.log and
estimate.json and the same run.json, each node loads its data with its protocol's `load`,
runs the same NodeHost and protocol code, and every message goes through the receiver's
validation before anything is applied. Each node has its own sampler, made as a node process
makes it (`secure` by default; `simulation` with the seed the launcher would hand that node),
so the view logs cannot be told from a networked run's.

What differs: no gRPC, no TLS, one process and one event loop (`node.transport.inprocess`),
no per-node stderr.txt, and every node's two logs share one pool of descriptors
(node/logfiles.py), fitted to hold all of them open when the open-file limit allows. Options
that only make sense for node processes are refused. And time: every node waits for its turn
on the one loop, so a round of n nodes takes about n times a node's work. The nodes keep the
published deadlines stretched by n / 64 (the headers still record the published ones), so a
live neighbour is never dropped as slow because its turn had not come.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from coordinator_tools.cluster.launch import (
    POLL_INTERVAL_S,
    TOPOLOGY_FILE,
    ClusterResult,
    LaunchOptions,
    LaunchProgress,
    Overrun,
    ProgressCallback,
    _collect,
    _write_summary,
    check_launch_inputs,
    default_timeout,
    node_simulation_seed,
    prepare_rundir,
)
from node.breaks import Breaks
from node.errors import ConfigError, NetdpError
from node.host import NodeOutcome
from node.logfiles import fit_shared_pool
from node.noise import NodeSamplers, make_samplers
from node.protocols.registry import protocol_spec
from node.runtime import shared_loop_network
from node.topology import NetworkParams, Topology, load_topology
from node.transport.inprocess import run_inprocess

# exit codes a `netdp-node` process would have had (node/cli.py)
EXIT_OK, EXIT_CRASHED, EXIT_ERROR, EXIT_STOPPED = 0, 1, 2, 3
LOGS_PER_NODE = 2  # view.log and private.log


def refuse_process_options(options: LaunchOptions) -> None:
    """A one-line ConfigError naming the options a virtual run cannot honour (they need node processes)."""
    refused = []
    if options.certs_dir is not None:
        refused.append("--certs")
    if options.kill_at_round:
        refused.append("--kill")
    if options.lost_reply_fraction:
        refused.append("lost replies (--fault-lose-replies)")
    if options.lost_ack_fraction:
        refused.append("lost acknowledgements (--fault-lose-acks)")
    if options.clock_speedup:
        refused.append("faster clocks (--fault-clock-speedup)")
    if options.budgets:
        refused.append("agents' own budgets (netdp-node --budget)")
    if refused:
        raise ConfigError(f"--virtual runs every node in one process, without TLS or fault injection; "
                          f"drop {', '.join(refused)}")


def virtual_network(topology: Topology) -> NetworkParams:
    """The published network parameters with the deadlines stretched for n ids sharing one event loop."""
    return shared_loop_network(topology.network, topology.n)


def node_samplers(options: LaunchOptions, node_id: int) -> NodeSamplers:
    """Node `node_id`'s samplers, exactly as `netdp-node` makes them from the launcher's command line."""
    return make_samplers(options.sampler, node_simulation_seed(options, node_id))


def run_virtual(topology_path: Path, data_dir: Path, rundir: Path, options: LaunchOptions = LaunchOptions(),
                on_progress: ProgressCallback | None = None) -> ClusterResult:
    """Run every node in this process until all finish (or the timeout), then collect as `run_cluster` does."""
    refuse_process_options(options)
    data_files = check_launch_inputs(load_topology(topology_path), data_dir, options)
    prepare_rundir(topology_path, rundir, canaries=options.canaries)
    topology = load_topology(Path(rundir) / TOPOLOGY_FILE)  # what each node process would load
    load = protocol_spec(topology.protocol.name).load
    private_data = [load(data_files[v], topology.protocol) for v in range(topology.n)]
    samplers = [node_samplers(options, v) for v in range(topology.n)]
    network = virtual_network(topology)
    timeout_s = options.timeout_s or default_timeout(topology, network)
    fit_shared_pool(LOGS_PER_NODE * topology.n)  # every log stays open when the fd limit allows: no reopen per append
    settled, timed_out = asyncio.run(_run(topology, network, private_data, Path(rundir), samplers, timeout_s,
                                          on_progress, options.breaks))
    result = ClusterResult(Path(rundir), topology, overrun=Overrun("run", timeout_s, 1, 1) if timed_out else None)
    result.nodes = [_node_result(Path(rundir), v, settled.get(v)) for v in range(topology.n)]
    _write_summary(result, options)
    return result


async def _run(topology: Topology, network: NetworkParams, private_data: list, rundir: Path,
               samplers: list[NodeSamplers], timeout_s: float, on_progress: ProgressCallback | None,
               breaks: Mapping[int, Breaks]) -> tuple[dict[int, object], bool]:
    started = dict.fromkeys(range(topology.n), 0)

    async def step_started(node: int, step: int) -> None:
        started[node] = max(started[node], step + 1)

    async def show_progress() -> None:
        while True:
            on_progress(LaunchProgress(dict(started), 1, 1))  # one process, this one: up
            await asyncio.sleep(POLL_INTERVAL_S)

    ticker = asyncio.create_task(show_progress()) if on_progress else None
    try:
        settled = await asyncio.wait_for(
            run_inprocess(topology, private_data, rundir, samplers.__getitem__, on_step=step_started,
                          return_exceptions=True, network=network, breaks=breaks),
            timeout_s)
        return settled, False
    except TimeoutError:
        return {}, True
    finally:
        if ticker is not None:
            ticker.cancel()


def _node_result(rundir: Path, node_id: int, settled: object):
    """What `launch._collect` reports for a node process, with the exit code and last words it would have had."""
    if isinstance(settled, NodeOutcome):
        return _collect(rundir, node_id, EXIT_OK, False)
    if settled is None:  # the run timed out: the launcher would have stopped it (netdp-node exits 3 then)
        result = _collect(rundir, node_id, EXIT_STOPPED, False)
        if result.estimate is not None:
            return replace(result, exit_code=EXIT_OK)
        return replace(result, stderr_tail="netdp-node: stopped before the run completed; logs are readable up to here")
    if isinstance(settled, NetdpError):
        return replace(_collect(rundir, node_id, EXIT_ERROR, False), stderr_tail=f"netdp-node: error: {settled}")
    if isinstance(settled, asyncio.CancelledError):
        return replace(_collect(rundir, node_id, EXIT_STOPPED, False),
                       stderr_tail="netdp-node: stopped before the run completed; logs are readable up to here")
    assert isinstance(settled, BaseException)
    tail = "".join(traceback.format_exception_only(type(settled), settled)).strip()
    return replace(_collect(rundir, node_id, EXIT_CRASHED, False), stderr_tail=tail)
