"""A Muffliato run simulated in numpy and written as the real logs of a run directory.

The auditor's unit tests need run directories whose truth they know. This helper runs
Alg. 1 in its global matrix form (x^{t+1} = W_t x^t, Chebyshev-accelerated), with an
optional lost edge, an optional late value (refused after its round closed, kept with its
payload) and an optional crashed node, and writes through `ViewLogWriter` exactly the
records each node would log. It also holds hand-made accountant results
(`fake_losses`) so report tests do not depend on the accountants.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from coordinator_tools.dataprep.datasets import synthetic_values
from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.mixing import accelerated_step, chebyshev_omega
from node.protocols.muffliato import NOISE_PURPOSE, PROTOCOL_NAME, MuffliatoParams
from node.topology import Topology, save_topology
from node.viewlog import FRAME, MAGIC, PRIVATE_LOG_NAME, VIEW_LOG_NAME, ViewLogWriter, encode_record, read_log

SIGMA = 0.5


def ring_topology(n: int = 6, *, rounds: int = 5, accelerated: bool = True, dimension: int = 3,
                  sigma: float = SIGMA) -> Topology:
    """A small Metropolis ring, the shape every replay test runs on."""
    return build_topology(
        nx.cycle_graph(n),
        graph_name="ring",
        run_id="replay-test",
        protocol=MuffliatoParams(sigma=sigma, sensitivity=1.0, alpha=2.0, rounds=rounds,
                                 accelerated=accelerated, dimension=dimension),
    )


@dataclass(frozen=True)
class Faults:
    """What goes wrong: messages on `lost_edge` fail from `lost_from` on; `crashed` dies at `crash_round`;
    the value `late` = (sender, receiver, round) arrives after the receiver closed that round.

    The crashed node sends its round-`crash_round` value to every neighbour (they use it),
    then dies before receiving anything of that round. The late value is dropped, then
    refused with its payload kept (it reached the receiver: it is in its view).
    """

    lost_edge: tuple[int, int] | None = None
    lost_from: int = 0
    crashed: int | None = None
    crash_round: int = 0
    late: tuple[int, int, int] | None = None

    def delivered(self, sender: int, receiver: int, t: int) -> bool:
        """Whether the sender's round-t message reached the receiver in time."""
        lost = self.lost_edge is not None and {sender, receiver} == set(self.lost_edge) and t >= self.lost_from
        receiver_dead = receiver == self.crashed and t >= self.crash_round
        return not lost and not receiver_dead and not self.is_late(sender, receiver, t) and self.sends(sender, t)

    def is_late(self, sender: int, receiver: int, t: int) -> bool:
        return self.late == (sender, receiver, t)

    def sends(self, node: int, t: int) -> bool:
        return node != self.crashed or t <= self.crash_round

    def completes(self, node: int, t: int) -> bool:
        return node != self.crashed or t < self.crash_round


@dataclass(frozen=True)
class SimulatedRun:
    """The run directory and the truth the replay must recover."""

    rundir: Path
    topology: Topology
    used: tuple[tuple[frozenset[int], ...], ...]  # used[v][t]
    values: tuple[tuple[np.ndarray, ...], ...]  # values[v][t] = x_v^t, for the rounds v reached
    inputs: np.ndarray
    noise: np.ndarray


def simulate_run(rundir: Path, topology: Topology, *, faults: Faults = Faults(), seed: int = 0,
                 sampler_kind: str = "simulation") -> SimulatedRun:
    """Simulate the run and write RUNDIR/topology.json and every node's view and private logs."""
    rundir = Path(rundir)
    params = topology.protocol
    rng = np.random.default_rng(seed)
    inputs = synthetic_values(topology.n, params.dimension, params.sensitivity, seed)
    noise = rng.normal(0.0, params.sigma, size=inputs.shape)
    used = tuple(
        tuple(frozenset(w for w in topology.neighbours[v] if faults.delivered(w, v, t))
              for t in range(params.rounds) if faults.completes(v, t))
        for v in range(topology.n)
    )
    values = _trajectories(topology, used, inputs + noise)
    save_topology(topology, rundir / TOPOLOGY_FILE)
    for v in range(topology.n):
        header = _header(topology, v, sampler_kind)
        with ViewLogWriter(node_log_dir(rundir, v) / VIEW_LOG_NAME, header) as log:
            for record in _view_records(topology, v, faults, used[v], values):
                log.append(record)
        header.section = "private"
        with ViewLogWriter(node_log_dir(rundir, v) / PRIVATE_LOG_NAME, header) as log:
            log.append(viewlog_pb2.Record(private_input=viewlog_pb2.PrivateInput(value=to_tensor(inputs[v]))))
            draw = viewlog_pb2.NoiseDraw(purpose=NOISE_PURPOSE, value=to_tensor(noise[v]), step=0,
                                         mechanism="gaussian", scale=params.sigma)
            log.append(viewlog_pb2.Record(noise=draw))
    return SimulatedRun(rundir, topology, used, values, inputs, noise)


def _trajectories(topology: Topology, used: tuple[tuple[frozenset[int], ...], ...],
                  initial: np.ndarray) -> tuple[tuple[np.ndarray, ...], ...]:
    """x^t for every node and round it reached, as dense W_t products (rows of stopped nodes unused)."""
    weights = topology.gossip_matrix().toarray()
    omega = chebyshev_omega(topology.spectral_gap)
    history = [initial]
    for t in range(topology.protocol.rounds):
        realized = np.zeros_like(weights)
        for v in range(topology.n):
            if t < len(used[v]):
                kept = sorted(used[v][t])
                realized[v, kept] = weights[v, kept]
                realized[v, v] = 1.0 - realized[v].sum()
        mixed = realized @ history[t]
        plain = t == 0 or not topology.protocol.accelerated
        history.append(mixed if plain else accelerated_step(history[t - 1], mixed, omega))
    return tuple(tuple(history[t][v] for t in range(len(used[v]) + 1)) for v in range(topology.n))


def _header(topology: Topology, node: int, sampler_kind: str) -> viewlog_pb2.RunHeader:
    public = json.loads(topology.public_parameters_json())
    public["sampler"] = {"kind": sampler_kind, "effective_sensitivity": topology.protocol.sensitivity}
    return viewlog_pb2.RunHeader(
        run_id=topology.run_id, protocol=PROTOCOL_NAME, node_id=node, topology_digest=topology.digest,
        public_parameters_json=json.dumps(public, sort_keys=True), sampler_kind=sampler_kind, section="public",
    )


def _view_records(topology: Topology, v: int, faults: Faults, used: tuple[frozenset[int], ...],
                  values: tuple[tuple[np.ndarray, ...], ...]) -> list[viewlog_pb2.Record]:
    """Node v's public records, round by round: its sends, then what it received or dropped."""
    records: list[viewlog_pb2.Record] = []
    for t in range(topology.protocol.rounds):
        if not faults.sends(v, t):
            break
        for w in topology.neighbours[v]:
            delivered = faults.delivered(v, w, t)
            failure = ("" if delivered else "FAILED_PRECONDITION: round closed" if faults.is_late(v, w, t)
                       else "UNAVAILABLE")
            sent = viewlog_pb2.MessageSent(peer=w, round=t, payload=to_tensor(values[v][t]), delivered=delivered,
                                           attempts=1 if delivered else 3, failure=failure)
            records.append(viewlog_pb2.Record(sent=sent))
        if t >= len(used):
            return records  # crashed after sending
        for w in topology.neighbours[v]:
            if w in used[t]:
                got = viewlog_pb2.MessageReceived(peer=w, round=t, payload=to_tensor(values[w][t]))
                records.append(viewlog_pb2.Record(received=got))
            else:
                records.append(viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=w, round=t, reason="deadline")))
            if faults.is_late(w, v, t):
                refused = viewlog_pb2.Rejected(claimed_sender=w, round=t, status_code="FAILED_PRECONDITION",
                                               detail=f"round {t} has closed", payload=to_tensor(values[w][t]))
                records.append(viewlog_pb2.Record(rejected=refused))
    final = viewlog_pb2.FinalOutput(value=to_tensor(values[v][-1]), rounds_completed=len(used))
    records.append(viewlog_pb2.Record(final_output=final))
    return records


# --- damaging logs ---------------------------------------------------------------------------


def record_offsets(path: Path) -> list[int]:
    """Byte offset of every complete record's frame in a log."""
    data = Path(path).read_bytes()
    offsets, offset = [], len(MAGIC)
    while offset + FRAME.size <= len(data):
        length, _ = FRAME.unpack_from(data, offset)
        offsets.append(offset)
        offset += FRAME.size + length
    return offsets


def corrupt_record(path: Path, index: int) -> None:
    """Flip one body byte of record `index`, so its checksum no longer matches."""
    offset = record_offsets(path)[index] + FRAME.size
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def tear_tail(path: Path) -> None:
    """Append half of a record, as a node killed in the middle of a write leaves it."""
    extra = encode_record(viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=0, round=0, reason="torn")))
    with open(path, "ab") as log:
        log.write(extra[: len(extra) // 2])


def rewrite_log(path: Path, transform: Callable[[viewlog_pb2.Record], viewlog_pb2.Record | None]) -> None:
    """Rewrite a log through `transform` (return the record to keep, edited or not, or None to drop it)."""
    kept = [record for record in map(transform, read_log(path).records) if record is not None]
    Path(path).unlink()
    with ViewLogWriter(path, kept[0].header) as log:
        for record in kept[1:]:
            log.append(record)


# --- hand-made accountant results ------------------------------------------------------------


def fake_losses(topology: Topology, *, alpha: float = 2.0, delta: float = 1e-5,
                attacked: tuple[tuple[int, int], ...] = ()) -> PairwiseLosses:
    """Per-pair losses that fall with hop distance: exact = LDP on neighbours, where the paper
    column is a third of it (undercounted), and paper 1.5x exact farther away.

    Not an accountant: values only have the shape reports and checks care about.
    """
    n = topology.n
    ldp_rdp = alpha / (2.0 * SIGMA**2)
    hops = nx.floyd_warshall_numpy(nx.Graph([(e.u, e.v) for e in topology.edges]), nodelist=range(n))
    exact = ldp_rdp / 4.0 ** (hops - 1.0)
    paper = np.where(hops == 1.0, exact / 3.0, exact * 1.5)

    def eps(rdp: np.ndarray | float) -> np.ndarray:
        return rdp + np.log(1.0 / delta) / (alpha - 1.0)  # the classic conversion

    empirical = np.full((n, n), np.nan)
    for u, v in attacked:
        empirical[u, v] = 0.5 * float(eps(exact[u, v]))
    np.fill_diagonal(paper, np.nan)
    np.fill_diagonal(exact, np.nan)
    reconstructable = hops == 1.0
    return PairwiseLosses(
        alpha=alpha, delta=delta, sigma=SIGMA, sensitivity=1.0, threat_model=ThreatModel(),
        paper_rdp=paper, paper_eps=eps(paper), exact_rdp_lower=exact, exact_eps_lower=eps(exact),
        exact_rdp_upper=exact.copy(), exact_eps_upper=eps(exact), reconstructable=reconstructable,
        ill_conditioned=np.zeros((n, n), dtype=bool), exact_method="rational",
        ldp_rdp=ldp_rdp, ldp_eps=float(eps(ldp_rdp)), central_rdp=ldp_rdp / n**2,
        central_eps=float(eps(ldp_rdp / n**2)), model_attack_eps_lower=empirical if attacked else None,
    )
