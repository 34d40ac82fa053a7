"""One node id's lifecycle, the same for every protocol and every transport.

The host opens the journal (header first), the receiver and the outbox, answers pings,
builds the protocol's context and node (which registers its mailboxes), and when the
protocol returns, logs the final output and writes `estimate.json`. `receiver` is what a
transport hands incoming messages to; `link_for(peer)` opens the link to a peer.

A restarted node rejoins its run (`resume`) only if its protocol can (`ProtocolSpec.resumable`):
the journal then appends to its logs and the protocol rebuilds its state from them. An agent's
own budget (`budget`, at most the published one) replaces the published one in the parameters
its protocol sees, and is written into the run header.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from netdp.v1 import viewlog_pb2
from node.agent_budget import BudgetRequest, header_fields, own_parameters
from node.breaks import Breaks
from node.canaries import Canaries
from node.context import NodeNoise, ProtocolContext
from node.delivery import PING, Bundler, Outbox
from node.errors import ConfigError
from node.journal import Journal
from node.message import Message
from node.noise import FairCoins, GaussianSampler, LaplaceSampler, RandomizedResponseSampler
from node.protocols.registry import protocol_spec
from node.receiver import Receiver
from node.topology import NetworkParams, Topology
from node.transport.base import PeerLink
from node.viewlog import LogContents

ESTIMATE_FILE = "estimate.json"
StepHook = Callable[[int], Awaitable[None]]


@dataclass(frozen=True)
class NodeOutcome:
    node_id: int
    estimate: np.ndarray
    steps_completed: int


class NodeHost:
    """The state one node id owns for one run."""

    def __init__(self, topology: Topology, node_id: int, private_data: Any, sampler: GaussianSampler,
                 log_dir: Path, link_for: Callable[[int], PeerLink], *, on_step: StepHook | None = None,
                 randomized_response: RandomizedResponseSampler | None = None,
                 network: NetworkParams | None = None, laplace: LaplaceSampler | None = None,
                 resume: bool = False, budget: BudgetRequest | None = None, clock_speedup: float = 1.0,
                 coins: FairCoins | None = None, breaks: Breaks = Breaks(), courier: Bundler | None = None) -> None:
        """`network`: deadlines to keep instead of the published ones (the header still records those);
        `resume`: rejoin the run logged in `log_dir`, if any; `budget`: the agent's own, below the published;
        `clock_speedup`: fault injection, the factor its Poisson clock runs faster than published;
        `coins`: where its canary signs come from (an audit run publishes `canaries`); `breaks`: its deliberate
        bugs (negative controls, written into its run header); `courier`: what bundles its one-way messages to the
        other ids of its process."""
        if not 0 <= node_id < topology.n:
            raise ValueError(f"node id {node_id} is not in the topology (n = {topology.n})")
        self.topology = topology
        self.node_id = node_id
        self.log_dir = Path(log_dir)
        spec = protocol_spec(topology.protocol_name)
        if resume and not spec.resumable:
            raise ConfigError(f"--resume: a {spec.name} node does not rejoin its run (fresh noise would leak more, "
                              "and its neighbours have dropped it); only personalized-cd agents resume")
        params = own_parameters(topology.protocol, node_id, budget)
        self.journal = Journal(self.log_dir, _header(topology, node_id, sampler, params, breaks, spec.gaussian),
                               resume=resume)
        canaries = _canaries(params, coins, self.journal.resumed_private)
        self.receiver = Receiver(topology, node_id, self.journal)
        self.receiver.register(PING, _pong, scheme="none", payload=False)
        self.outbox = Outbox(link_for, self.journal, run_id=topology.run_id, protocol=topology.protocol_name,
                             sender=node_id, courier=courier)
        noise = NodeNoise(sampler, self.journal, randomized_response, laplace, broken_scale=breaks.noise_scale)
        context = ProtocolContext(topology, node_id, self.journal, self.receiver, self.outbox, noise,
                                  on_step or _no_hook, network, params, clock_speedup=clock_speedup,
                                  canaries=canaries, breaks=breaks)
        self._protocol = spec.start(context, private_data)

    async def run(self) -> NodeOutcome:
        """Run the protocol to its end, then log the output and write the estimate."""
        output = await self._protocol.run()
        await self.journal.final_output(output.value, output.steps_completed)
        self._write_estimate(output.value, output.steps_completed)
        return NodeOutcome(self.node_id, output.value, output.steps_completed)

    def _write_estimate(self, estimate: np.ndarray, steps_completed: int) -> None:
        """The node's output for its user: the data coordinates (an audit run's canary coordinates stay in the log)."""
        estimate = estimate[: self.topology.published.dimension]
        document = {
            "run_id": self.topology.run_id,
            "node_id": self.node_id,
            "rounds_completed": steps_completed,
            "value": [float(x) for x in estimate],
        }
        tmp = self.log_dir / (ESTIMATE_FILE + ".tmp")
        tmp.write_text(json.dumps(document) + "\n", encoding="utf-8")
        tmp.replace(self.log_dir / ESTIMATE_FILE)

    async def close(self) -> None:
        await self.outbox.close()
        self.journal.close()


def _canaries(params: Any, coins: FairCoins | None, resumed_private: LogContents | None) -> Canaries:
    """The node's canary signs when the run publishes canaries: those its private log holds at a restart, else
    fresh ones; ConfigError when it has nothing to draw them with."""
    if not params.canaries:
        return Canaries(np.zeros(0))
    recalled = None if resumed_private is None else Canaries.recalled(resumed_private)
    if recalled is not None:
        return recalled
    if coins is None:
        raise ConfigError(f"the topology publishes {params.canaries} canaries and this node was given no coins")
    return Canaries.drawn(params.canaries, coins)


def _header(topology: Topology, node_id: int, sampler: GaussianSampler, params: Any,
            breaks: Breaks, gaussian: bool) -> viewlog_pb2.RunHeader:
    """The run header: the published parameters, the sampler, for an agent with a budget the one it runs under,
    and any deliberate break of this node."""
    public = json.loads(topology.public_parameters_json()) | header_fields(params, node_id)
    if breaks.active:
        public["break"] = breaks.header()
    # Randomized response, and Laplace noise whose grid each step's logged epsilon accounts: no Gaussian grid.
    public["sampler"] = {
        "kind": sampler.kind,
        "effective_sensitivity": (sampler.effective_sensitivity(params.sensitivity, params.sigma) if gaussian
                                  else params.sensitivity),
    }
    return viewlog_pb2.RunHeader(
        run_id=topology.run_id,
        protocol=params.name,
        node_id=node_id,
        topology_digest=topology.digest,
        public_parameters_json=json.dumps(public, sort_keys=True),
        sampler_kind=sampler.kind,
    )


async def _pong(sender: int, message: Message) -> None:
    """Pings are answered (with an empty acknowledgement) and not logged: they carry nothing."""
    return None


async def _no_hook(step: int) -> None:
    return None
