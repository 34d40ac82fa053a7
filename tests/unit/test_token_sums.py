"""ring-sum and walk-sum: the noise rules, the graphs they accept, and whole runs between in-process nodes.

The in-process runs go through the real receivers, token slots and logs (only gRPC is left
out), so custody, refusals and the run deadlines behave as on real processes, in a fraction
of the time: the deadlines here are a fraction of a second.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Collection
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.codec import from_tensor
from node.host import NodeHost, NodeOutcome
from node.mailboxes.token_slot import ACKNOWLEDGED, KEPT, RECEIVED
from node.message import Message, MessageId, to_wire
from node.noise import SimulationSampler
from node.protocols.ring_sum import RingSumParams, noise_sigma
from node.protocols.token_sum import SUM_TOKEN_ID, TOKEN, TokenWalkError
from node.protocols.walk_sum import WalkSumParams
from node.refusal import Refusal
from node.topology import NetworkParams, Topology
from node.transport.inprocess import InProcessLink
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

NETWORK = NetworkParams(round_deadline_s=0.1, startup_deadline_s=0.2)


def alg1_noisy_hops(n: int, cycles: int) -> list[int]:
    """The hops (contributions so far) at which PAbD Alg. 1's loop, transcribed literally, adds noise."""
    noisy, a, hop = [], 0, 0
    for _ in range(cycles):
        for _ in range(n):
            if a == 0:
                noisy.append(hop)
                a = n - 2
            else:
                a -= 1
            hop += 1
    return noisy


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("cycles", [1, 2, 3, 7])
def test_single_placement_noises_where_the_counter_of_alg1_is_zero_and_at_the_last_hop(n, cycles):
    rule = [hop for hop in range(cycles * n) if noise_sigma(hop, n, cycles, 0.7, "single") is not None]
    assert rule == sorted(set(alg1_noisy_hops(n, cycles)) | {cycles * n - 1})
    assert all(noise_sigma(hop, n, cycles, 0.7, "single") == 0.7 for hop in rule)
    # Alg. 1's first contribution is always noised, so its count is the ceiling (Thm 1's floor is one short
    # unless n - 1 divides Kn); the last is noised too, unless Alg. 1 already puts a draw there.
    last_in_alg1 = (cycles * n - 1) % (n - 1) == 0
    assert len(rule) == math.ceil(cycles * n / (n - 1)) + (0 if last_in_alg1 else 1)
    params = RingSumParams(sigma=0.7, sensitivity=1.0, alpha=2.0, dimension=1, cycles=cycles)
    assert params.sum_noise_std(n) == pytest.approx(0.7 * math.sqrt(len(rule)))


@pytest.mark.parametrize("n, cycles", [(3, 1), (8, 2), (16, 3)])
def test_distributed_placement_noises_every_contribution_and_the_first_and_last_in_full(n, cycles):
    sigmas = [noise_sigma(hop, n, cycles, 2.0, "distributed") for hop in range(cycles * n)]
    assert sigmas[0] == sigmas[-1] == 2.0
    assert sigmas[1:-1] == pytest.approx([2.0 / math.sqrt(n)] * (cycles * n - 2))
    params = RingSumParams(sigma=2.0, sensitivity=1.0, alpha=2.0, dimension=1, cycles=cycles,
                           noise_placement="distributed")
    assert params.sum_noise_std(n) == pytest.approx(2.0 * math.sqrt(2 + (cycles * n - 2) / n))


def test_the_walk_noises_every_visit():
    params = WalkSumParams(sigma=0.5, sensitivity=1.0, alpha=2.0, dimension=1, steps=9)
    assert params.noise_sigmas(4) == [0.5] * 9 and params.sum_noise_std(4) == pytest.approx(1.5)


def topology(graph: nx.Graph, protocol, **fields) -> Topology:
    return build_topology(graph, graph_name="test", run_id="unit", protocol=protocol, network=NETWORK, **fields)


RING = RingSumParams(sigma=0.0, sensitivity=10.0, alpha=2.0, dimension=2, cycles=2)
WALK = WalkSumParams(sigma=0.0, sensitivity=10.0, alpha=2.0, dimension=2, steps=30)


@pytest.mark.parametrize("graph, why", [
    (generate("hypercube", n=8), "not that ring"),
    (nx.relabel_nodes(generate("ring", n=6), {0: 0, 1: 2, 2: 1, 3: 3, 4: 4, 5: 5}), "not that ring"),
    (nx.compose(generate("ring", n=6), nx.Graph([(0, 3)])), "not that ring"),
])
def test_ring_sum_runs_on_the_public_ring_only(graph, why):
    with pytest.raises(ValueError, match=why):
        topology(graph, RING)
    assert topology(generate("ring", n=6), RING).protocol.name == "ring-sum"
    arcs = [{"u": v, "v": (v + 1) % 5, "weight": 1.0} for v in range(5)]
    document = topology(generate("ring", n=5), RING).model_dump(exclude={"edges", "spectral_gap", "gamma"})
    assert Topology.model_validate({**document, "arcs": arcs, "weighting": "explicit"}).graph_shape == "directed"


def test_walk_sum_runs_on_the_complete_graph_only():
    with pytest.raises(ValueError, match="complete graph, and node 0 has 2 neighbours of 5"):
        topology(generate("ring", n=6), WALK)
    assert topology(generate("complete", n=6), WALK).protocol.name == "walk-sum"


# --- whole runs between in-process nodes -------------------------------------------------------


async def run_nodes(topology: Topology, values: np.ndarray, root: Path, *, absent: Collection[int] = (),
                    steps_seen: dict[int, list[int]] | None = None) -> dict[int, NodeOutcome | BaseException]:
    """Every node but the absent ones in this event loop; what each returned or raised.

    `steps_seen`, when given, collects the local steps each node announced (where a kill strikes).
    """
    hosts: dict[int, NodeHost] = {}

    def step_hook(v: int):
        async def seen(step: int) -> None:
            steps_seen.setdefault(v, []).append(step)
        return seen if steps_seen is not None else None

    def link_for(sender: int):
        return lambda peer: InProcessLink(sender, hosts[peer].receiver if peer in hosts else None)

    for v in (v for v in range(topology.n) if v not in absent):
        hosts[v] = NodeHost(topology, v, values[v], SimulationSampler(v), root / f"node-{v}", link_for(v),
                            on_step=step_hook(v))
    try:
        outcomes = await asyncio.gather(*(host.run() for host in hosts.values()), return_exceptions=True)
    finally:
        for host in hosts.values():
            await host.close()
    return dict(zip(hosts, outcomes))


def inputs(n: int) -> np.ndarray:
    return np.random.default_rng(3).normal(size=(n, 2))


def custody(root: Path, v: int) -> list[tuple[str, int, str]]:
    return [(e.token_id, e.hop, e.phase) for e in read_log(root / f"node-{v}" / VIEW_LOG_NAME).of_kind("token")]


def noise_draws(root: Path, nodes: Collection[int]) -> list:
    return [draw for v in nodes for draw in read_log(root / f"node-{v}" / PRIVATE_LOG_NAME).of_kind("noise")]


async def test_ring_sum_with_distributed_noise_is_the_sum_plus_the_logged_draws(tmp_path):
    n, params = 5, RingSumParams(sigma=0.3, sensitivity=10.0, alpha=2.0, dimension=2, cycles=2,
                                 noise_placement="distributed")
    values = inputs(n)
    outcomes = await run_nodes(topology(generate("ring", n=n), params), values, tmp_path)
    draws = noise_draws(tmp_path, range(n))
    assert sorted(draw.scale for draw in draws) == pytest.approx([0.3 / math.sqrt(n)] * (2 * n - 2) + [0.3] * 2)
    expected = 2 * values.sum(axis=0) + sum(from_tensor(draw.value) for draw in draws)
    for outcome in outcomes.values():
        assert np.allclose(outcome.estimate, expected, rtol=0.0, atol=1e-12) and outcome.steps_completed == 2


async def test_a_walk_that_draws_its_holder_again_keeps_the_token_and_contributes_again(tmp_path):
    """On 3 nodes a third of the draws are self-draws: 29 hand-overs without one would take (2/3)^29 < 1e-5."""
    n = 3
    values, steps_seen = inputs(n), {}
    outcomes = await run_nodes(topology(generate("complete", n=n), WALK), values, tmp_path, steps_seen=steps_seen)
    records = {v: custody(tmp_path, v) for v in range(n)}
    holder = {0: 0} | {hop: v for v in range(n) for _, hop, phase in records[v] if phase in (RECEIVED, KEPT)}
    assert sorted(holder) == list(range(WALK.steps))  # every hop taken once
    assert any(phase == KEPT for v in range(n) for _, _, phase in records[v])
    visits = [sum(1 for h in holder.values() if h == v) for v in range(n)]
    assert [outcomes[v].steps_completed for v in range(n)] == visits
    for outcome in outcomes.values():
        assert np.allclose(outcome.estimate, visits @ values, rtol=0.0, atol=1e-12)
    for v in range(n):  # a kept visit is no step: step k starts at the k-th hand-over to another node
        hand_overs = sum(1 for _, _, phase in records[v] if phase == ACKNOWLEDGED)
        assert steps_seen[v] == list(range(hand_overs + 1))


async def test_a_walk_draws_again_around_a_node_that_is_down(tmp_path):
    n = 4
    values = inputs(n)
    outcomes = await run_nodes(topology(generate("complete", n=n), WALK), values, tmp_path, absent={2})
    visits = [outcomes[v].steps_completed if v != 2 else 0 for v in range(n)]
    assert sum(visits) == WALK.steps
    for outcome in outcomes.values():
        assert np.allclose(outcome.estimate, visits @ values, rtol=0.0, atol=1e-12)


async def test_a_ring_whose_successor_is_down_stops_everyone_with_a_reason(tmp_path):
    """Node 2 never comes up: node 1 retries until the run deadline, the others wait until it too."""
    n = 4
    outcomes = await run_nodes(topology(generate("ring", n=n), RING), inputs(n), tmp_path, absent={2})
    assert all(isinstance(outcome, TokenWalkError) for outcome in outcomes.values())
    assert str(outcomes[1]).startswith("node 2 did not take the sum token (hop 2) before the run deadline")
    for waiting in (0, 3):  # node 0 waits for the second cycle
        assert str(outcomes[waiting]).startswith("no sum token came within the run deadline")
    assert {phase for _, hop, phase in custody(tmp_path, 1) if hop == 2} == {"forwarded"}  # tried, never passed


async def test_a_ring_node_takes_tokens_from_its_predecessor_at_its_own_hops_only(tmp_path):
    n = 4
    ring = topology(generate("ring", n=n), RING)
    host = NodeHost(ring, 1, inputs(n)[1], SimulationSampler(1), tmp_path / "node-1",
                    lambda peer: InProcessLink(1, None))

    async def deliver(sender: int, hop: int) -> None:
        message = Message(TOKEN, MessageId(token_id=SUM_TOKEN_ID, hop=hop), np.zeros(2))
        envelope, data = to_wire(message, run_id=ring.run_id, protocol=ring.protocol.name, sender=sender, receiver=1)
        await host.receiver.accept(envelope, data, None)

    refusals = [(2, 1, "PERMISSION_DENIED"), (0, 2, "FAILED_PRECONDITION"), (0, 9, "FAILED_PRECONDITION")]
    for sender, hop, code in refusals:
        with pytest.raises(Refusal) as refused:
            await deliver(sender, hop)
        assert refused.value.code == code
    await deliver(0, 5)  # node 1's hop in the second cycle
    await host.close()
    assert custody(tmp_path, 1) == [(SUM_TOKEN_ID, 5, RECEIVED)]
    assert len(read_log(tmp_path / "node-1" / VIEW_LOG_NAME).of_kind("rejected")) == 3
