"""One peer of a run, independent of the transport: data, noise, journal, protocol.

`Peer.run` takes links to the neighbours (gRPC or in-process) and drives the protocol;
`Peer.receiver` is what the transport hands incoming messages to.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from netdp.v1 import viewlog_pb2
from node.data import clip_to_ball
from node.inbox import NeighbourFates
from node.journal import Delivery, Journal
from node.noise import GaussianSampler
from node.outbox import Outbox
from node.protocols.muffliato import PROTOCOL_NAME, run_gossip
from node.receiver import Receiver
from node.topology import Topology
from node.transport.base import PeerLink

ESTIMATE_FILE = "estimate.json"
NOISE_PURPOSE = "muffliato_init"


@dataclass(frozen=True)
class PeerOutcome:
    node_id: int
    estimate: np.ndarray
    rounds_completed: int


class Peer:
    """The state one node owns for one run."""

    def __init__(self, topology: Topology, node_id: int, value: np.ndarray, sampler: GaussianSampler,
                 log_dir: Path) -> None:
        if not 0 <= node_id < topology.n:
            raise ValueError(f"node id {node_id} is not in the topology (n = {topology.n})")
        self.topology = topology
        self.node_id = node_id
        self.log_dir = Path(log_dir)
        self._value = np.asarray(value, dtype=np.float64)
        self._sampler = sampler
        self.journal = Journal(self.log_dir, self._header())
        self.receiver = Receiver(topology, node_id, self.journal)

    def _header(self) -> viewlog_pb2.RunHeader:
        params = self.topology.protocol
        public = json.loads(self.topology.public_parameters_json())
        public["sampler"] = {
            "kind": self._sampler.kind,
            "effective_sensitivity": self._sampler.effective_sensitivity(params.sensitivity, params.sigma),
        }
        return viewlog_pb2.RunHeader(
            run_id=self.topology.run_id,
            protocol=PROTOCOL_NAME,
            node_id=self.node_id,
            topology_digest=self.topology.digest,
            public_parameters_json=json.dumps(public, sort_keys=True),
            sampler_kind=self._sampler.kind,
        )

    async def run(self, links: dict[int, PeerLink],
                  before_round: Callable[[int], None] | None = None) -> PeerOutcome:
        """Clip, add noise once, gossip for T rounds, log and write the estimate.

        `before_round(t)` runs as each round starts (the networked runtime's fault injection).
        """
        params = self.topology.protocol
        network = self.topology.network
        outbox = Outbox(links, self.journal, run_id=self.topology.run_id, protocol=PROTOCOL_NAME,
                        sender=self.node_id, attempts=network.send_attempts)
        clipped, was_clipped = clip_to_ball(self._value, params.sensitivity / 2.0)
        noisy = self._sampler.perturb(clipped, params.sigma)
        await self.journal.private_input(clipped, was_clipped)
        await self.journal.noise(NOISE_PURPOSE, noisy - clipped)

        async def exchange(round_index: int, value: np.ndarray) -> dict[int, np.ndarray]:
            if before_round is not None:
                before_round(round_index)
            budget = network.startup_deadline_s if round_index == 0 else network.round_deadline_s
            fates = NeighbourFates()

            async def record_fate(peer: int, delivery: Delivery) -> None:
                if fates.record(peer, delivery):
                    await self.receiver.inbox.wake()

            sending = asyncio.create_task(outbox.broadcast(round_index, value, budget, record_fate))
            received = await self.receiver.inbox.collect(
                round_index, budget, patience_s=budget * network.patience_factor, fates=fates)
            await sending
            return received

        estimate = await run_gossip(self.topology, self.node_id, noisy, exchange)
        await self.journal.final_output(estimate, params.rounds)
        self._write_estimate(estimate, params.rounds)
        return PeerOutcome(self.node_id, estimate, params.rounds)

    def _write_estimate(self, estimate: np.ndarray, rounds_completed: int) -> None:
        document = {
            "run_id": self.topology.run_id,
            "node_id": self.node_id,
            "rounds_completed": rounds_completed,
            "value": [float(x) for x in estimate],
        }
        tmp = self.log_dir / (ESTIMATE_FILE + ".tmp")
        tmp.write_text(json.dumps(document) + "\n", encoding="utf-8")
        tmp.replace(self.log_dir / ESTIMATE_FILE)

    def close(self) -> None:
        self.journal.close()
