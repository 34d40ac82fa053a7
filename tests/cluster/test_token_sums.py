"""Token summations on real processes over gRPC: ring-sum (PAbD Alg. 1) and walk-sum (Alg. 3).

Every test runs 8 node processes on loopback. The sums are checked exactly: with σ = 0 every
node's estimate is the sum of the contributions that really happened, and with noise the
estimate minus the true sum is the sum of the draws in the private logs. The token's history,
rebuilt from the custody records of all views, must be one unbroken chain: each hop taken by
exactly one node, from the node that held the hop before, also when the network loses the
acknowledgements of deliveries that were taken (the sender retries, the receiver acknowledges
again without taking the hop twice).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import chi2

from coordinator_tools.cluster.launch import (
    ClusterResult,
    LaunchOptions,
    node_log_dir,
    run_cluster,
)
from node.codec import from_tensor
from node.mailboxes.token_slot import ACKNOWLEDGED, FORWARDED, KEPT, RECEIVED
from node.protocols.ring_sum import RingSumParams
from node.protocols.token_sum import NOISE_PURPOSE, SUM_TOKEN_ID, TOKEN
from node.protocols.walk_sum import START, WalkSumParams
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster
N = 8
DIMENSION = 3
EXACT = 1e-9
NO_FAULTS = LaunchOptions()
LOSSY = {v: 0.5 for v in range(1, N, 2)}  # node -> share of the acknowledgements of its deliveries it loses


@dataclass(frozen=True)
class Custody:
    node: int
    token_id: str
    hop: int
    phase: str
    peer: int | None


def custody(result: ClusterResult) -> list[Custody]:
    records = []
    for v in range(N):
        for event in read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME).of_kind("token"):
            records.append(Custody(v, event.token_id, event.hop, event.phase,
                                   event.peer if event.HasField("peer") else None))
    return records


def holders(result: ClusterResult, token_id: str, hops: int, origin: int, *, acks_lost: bool = False) -> list[int]:
    """The holder of every hop 0..hops-1, checking that the history is one unbroken chain.

    Each hop was `forwarded` by its sender, and `acknowledged` too unless acknowledgements were
    lost (`acks_lost`): a sender may then have seen its delivery fail although the hop was taken.
    """
    records = [r for r in custody(result) if r.token_id == token_id]
    chain = [origin]
    for hop in range(1, hops):
        taken = [r for r in records if r.hop == hop and r.phase in (RECEIVED, KEPT)]
        assert len(taken) == 1, f"hop {hop} taken {len(taken)} times: {taken}"  # neither lost nor duplicated
        (take,) = taken
        if take.phase == KEPT:  # the holder drew itself
            assert take.node == chain[-1], take
        else:
            assert take.peer == chain[-1], f"hop {hop} came from node {take.peer}, hop {hop - 1} was at {chain[-1]}"
            handed = {r.phase for r in records if r.node == take.peer and r.hop == hop and r.peer == take.node}
            assert ({FORWARDED} if acks_lost else {FORWARDED, ACKNOWLEDGED}) <= handed, (hop, handed)
        chain.append(take.node)
    assert not [r for r in records if r.hop >= hops], "the token went past its last hop"
    return chain


def assert_each_hop_received_once(result: ClusterResult) -> set[int]:
    """Check that every (token id, hop) was logged as received once, however often it was sent; return the
    nodes some token was sent to more than once (a lost acknowledgement, whether or not a later one arrived)."""
    received: Counter[tuple[str, int]] = Counter()
    resent = set()
    for v in range(N):
        log = read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME)
        received.update((r.token_id, r.hop) for r in log.of_kind("received") if r.token_id)
        resent |= {s.peer for s in log.of_kind("sent") if s.token_id and s.attempts > 1}
    assert all(count == 1 for count in received.values()), [key for key, count in received.items() if count > 1]
    return resent


def private(result: ClusterResult, v: int, kind: str) -> list:
    return read_log(node_log_dir(result.rundir, v) / PRIVATE_LOG_NAME).of_kind(kind)


def assert_every_estimate(result: ClusterResult, expected: np.ndarray, nodes=range(N)) -> None:
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    estimates = result.estimates()
    assert sorted(estimates) == list(nodes)
    for v in nodes:
        assert np.max(np.abs(estimates[v] - expected)) <= EXACT * max(1.0, np.max(np.abs(expected))), v


def run(make_cluster_files, name: str, kind: str, protocol, options: LaunchOptions = NO_FAULTS):
    files = make_cluster_files(kind=kind, n=N, name=name, protocol=protocol, round_deadline_s=2.0,
                               startup_deadline_s=20.0)
    return files, run_cluster(files.topology_path, files.data_dir, files.root / "run", options)


def ring(cycles: int, sigma: float = 0.0) -> RingSumParams:
    return RingSumParams(sigma=sigma, sensitivity=100.0, alpha=2.0, dimension=DIMENSION, cycles=cycles)


def walk(steps: int, sigma: float = 0.0) -> WalkSumParams:
    return WalkSumParams(sigma=sigma, sensitivity=100.0, alpha=2.0, dimension=DIMENSION, steps=steps)


@pytest.mark.parametrize("cycles", [1, 2])
def test_noiseless_ring_sum_gives_every_node_the_exact_sum(make_cluster_files, cycles):
    files, result = run(make_cluster_files, f"ring-exact-{cycles}", "ring", ring(cycles))
    assert_every_estimate(result, cycles * files.values.sum(axis=0))
    assert holders(result, SUM_TOKEN_ID, cycles * N, 0) == [hop % N for hop in range(cycles * N)]
    assert holders(result, "result", N, N - 1) == [(N - 1 + hop) % N for hop in range(N)]
    assert all(len(private(result, v, "private_input")) == cycles for v in range(N))  # once per visit


def test_ring_sum_noise_is_exactly_the_logged_draws(make_cluster_files):
    """K = 2: Alg. 1 draws at hops 0, 7 and 14, ceil(Kn/(n-1)) = 3 draws (Thm 1's floor says 2), and the last
    contribution (hop 15, node 7's second visit) draws too."""
    files, result = run(make_cluster_files, "ring-noise", "ring", ring(2, sigma=0.5))
    noise = {(v, draw.step): draw for v in range(N) for draw in private(result, v, "noise")}
    assert sorted(noise) == [(0, 0), (6, 1), (7, 0), (7, 1)] and math.ceil(2 * N / (N - 1)) == 3
    assert {(draw.purpose, draw.scale) for draw in noise.values()} == {(NOISE_PURPOSE, 0.5)}
    assert_every_estimate(result, 2 * files.values.sum(axis=0) + sum(from_tensor(d.value) for d in noise.values()))


def test_noiseless_walk_sum_is_the_sum_over_its_realized_visits(make_cluster_files):
    steps = 24
    files, result = run(make_cluster_files, "walk-exact", "complete", walk(steps))
    chain = holders(result, SUM_TOKEN_ID, steps, START)
    assert_every_estimate(result, sum(files.values[v] for v in chain))
    for v in range(N):
        assert len(private(result, v, "private_input")) == chain.count(v)


def test_a_walk_goes_round_a_killed_node_and_keeps_one_token(make_cluster_files):
    """Node 0 is SIGKILLed once it has passed the token on (its step 1): later draws of it fail and are redrawn.

    80 steps make a later draw of node 0 all but certain (1 - (7/8)^79 > 0.9999).
    """
    steps = 80
    files, result = run(make_cluster_files, "walk-killed", "complete", walk(steps),
                        LaunchOptions(kill_at_round={0: 1}))
    assert result.nodes[0].killed_by_request
    chain = holders(result, SUM_TOKEN_ID, steps, START)
    assert_every_estimate(result, sum(files.values[v] for v in chain), nodes=range(1, N))
    first_away = next(hop for hop, holder in enumerate(chain) if holder != 0)
    assert 0 not in chain[first_away:]  # dead once it had passed the token on
    refused = [(v, record) for v in range(1, N)
               for record in read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME).of_kind("sent")
               if record.kind == TOKEN and record.peer == 0 and not record.delivered]
    assert refused, "no holder drew the dead node"


def test_ring_sum_takes_each_hop_once_when_acknowledgements_are_lost(make_cluster_files):
    """The odd nodes lose half the acknowledgements of the tokens they took: their predecessors retry.

    Some 11 deliveries go to a lossy node (8 of the sum, 3 of the result), so all were acknowledged at
    once with probability 2^-11.
    """
    cycles = 2
    files, result = run(make_cluster_files, "ring-lost-acks", "ring", ring(cycles),
                        LaunchOptions(lost_ack_fraction=LOSSY))
    assert_every_estimate(result, cycles * files.values.sum(axis=0))
    assert holders(result, SUM_TOKEN_ID, cycles * N, 0, acks_lost=True) == [hop % N for hop in range(cycles * N)]
    assert holders(result, "result", N, N - 1, acks_lost=True) == [(N - 1 + hop) % N for hop in range(N)]
    assert assert_each_hop_received_once(result) & set(LOSSY), "no acknowledgement was lost"


def test_walk_sum_takes_each_hop_once_when_acknowledgements_are_lost(make_cluster_files):
    """Half the nodes lose half the acknowledgements of the tokens they took: the walk must not fork.

    A sender whose every attempt lost its acknowledgement must not draw another holder: the drawn
    one took the token and walks on. Some 10 of the 23 draws go to a lossy node elsewhere.
    """
    steps = 24
    files, result = run(make_cluster_files, "walk-lost-acks", "complete", walk(steps),
                        LaunchOptions(lost_ack_fraction=LOSSY))
    chain = holders(result, SUM_TOKEN_ID, steps, START, acks_lost=True)
    assert_every_estimate(result, sum(files.values[v] for v in chain))
    for v in range(N):
        assert len(private(result, v, "private_input")) == chain.count(v)
    assert assert_each_hop_received_once(result) & set(LOSSY), "no acknowledgement was lost"


@pytest.mark.parametrize("protocol", [
    pytest.param(RingSumParams(sigma=0.5, sensitivity=2.0, alpha=2.0, dimension=200, cycles=2), id="ring-single"),
    pytest.param(RingSumParams(sigma=0.5, sensitivity=2.0, alpha=2.0, dimension=200, cycles=2,
                               noise_placement="distributed"), id="ring-distributed"),
    pytest.param(WalkSumParams(sigma=0.5, sensitivity=2.0, alpha=2.0, dimension=200, steps=16), id="walk"),
])
def test_noisy_sums_are_unbiased_with_the_std_the_protocol_states(make_cluster_files, protocol):
    """The noise of the sum is the same in every coordinate and independent across them, so one run with
    D = 200 gives 200 draws of it, from the nodes' real (secure) samplers: their mean is 0 and their
    variance `sum_noise_std(n)`² within 99.99% intervals (z and chi-square), whatever the draws were."""
    files, result = run(make_cluster_files, f"unbiased-{protocol.name}-{protocol.dimension}", "ring"
                        if protocol.name == "ring-sum" else "complete", protocol)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    if protocol.name == "ring-sum":
        true_sum = protocol.cycles * files.values.sum(axis=0)
    else:
        true_sum = sum(files.values[v] for v in holders(result, SUM_TOKEN_ID, protocol.steps, START))
    errors = result.estimates()[0] - true_sum
    std, count = protocol.sum_noise_std(N), protocol.dimension
    assert abs(errors.mean()) <= 3.9 * std / math.sqrt(count), errors.mean()  # two-sided 99.99%
    ratio = (count - 1) * errors.var(ddof=1) / std**2
    assert chi2.ppf(5e-5, count - 1) <= ratio <= chi2.ppf(1 - 5e-5, count - 1), (ratio, count - 1)
