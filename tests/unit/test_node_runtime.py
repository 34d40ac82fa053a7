"""The node's transport-neutral runtime, driven through the in-process transport."""

from __future__ import annotations

import asyncio
import filecmp
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.journal import Journal
from node.mailboxes.liveness import PROBE_INTERVAL_S, Liveness
from node.mailboxes.round_barrier import NeighbourFates, RoundBarrier
from node.noise import SecureGaussianSampler, SimulationSampler
from node.protocols.gossip import mix
from node.protocols.muffliato import MuffliatoParams
from node.refusal import Refusal
from node.topology import NetworkParams
from node.transport.inprocess import run_inprocess
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

PROTO_DIR = Path(__file__).resolve().parents[2] / "proto"


def ring_topology(n: int = 6, *, sigma: float = 0.0, rounds: int = 5, accelerated: bool = True,
                  round_deadline_s: float = 0.2):
    return build_topology(
        generate("ring", n=n), graph_name="ring", run_id="unit",
        protocol=MuffliatoParams(sigma=sigma, sensitivity=10.0, alpha=2.0, rounds=rounds,
                                 accelerated=accelerated, dimension=2),
        network=NetworkParams(round_deadline_s=round_deadline_s, startup_deadline_s=round_deadline_s),
    )


def waited_s(drop: viewlog_pb2.DropOut) -> float:
    """How long the node waited before dropping the peer, from the logged reason 'no value after X s'."""
    return float(drop.reason.removeprefix("no value after ").removesuffix(" s"))


def test_generated_stubs_match_the_proto_files(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate", PROTO_DIR / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(tmp_path)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    assert generated, "protoc wrote nothing"
    for relative in generated:
        assert filecmp.cmp(tmp_path / relative, PROTO_DIR / relative, shallow=False), f"{relative} is stale"


async def test_round_inbox_refuses_closed_far_and_duplicate_rounds(tmp_path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    inbox = RoundBarrier(lambda round_index: (1, 2), journal)
    await inbox.deliver(1, 0, np.ones(2))
    await inbox.deliver(1, 1, np.ones(2))  # one round ahead is fine
    with pytest.raises(Refusal) as far:
        await inbox.deliver(2, 2, np.ones(2))
    assert far.value.code == "OUT_OF_RANGE"
    with pytest.raises(Refusal) as duplicate:
        await inbox.deliver(1, 0, np.zeros(2))
    assert duplicate.value.code == "ALREADY_EXISTS"
    values = await inbox.collect(0, 0.05, patience_s=0.05, fates=NeighbourFates())
    assert set(values) == {1} and np.array_equal(values[1], np.ones(2))
    with pytest.raises(Refusal) as closed:
        await inbox.deliver(2, 0, np.ones(2))
    assert closed.value.code == "FAILED_PRECONDITION"  # 2 was dropped from the closed round
    with pytest.raises(Refusal) as used:
        await inbox.deliver(1, 0, np.ones(2))
    assert used.value.code == "ALREADY_EXISTS"  # 1's value was used: not a sign that 1 was dropped
    journal.close()
    kinds = [r.WhichOneof("kind") for r in read_log(tmp_path / VIEW_LOG_NAME).records]
    assert kinds == ["header", "received", "received", "drop_out"]


@pytest.mark.parametrize("fates", [NeighbourFates(unreachable={2}), NeighbourFates(moved_on={2})],
                         ids=["unreachable", "moved-on"])
async def test_a_neighbour_whose_value_cannot_come_is_dropped_without_waiting_for_the_deadline(tmp_path, fates):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    inbox = RoundBarrier(lambda round_index: (1, 2), journal)
    await inbox.deliver(1, 0, np.ones(2))
    values = await asyncio.wait_for(inbox.collect(0, 3600.0, patience_s=3600.0, fates=fates), timeout=10.0)
    assert set(values) == {1}
    journal.close()
    (drop,) = read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")
    assert (drop.peer, drop.round) == (2, 0)


async def test_a_node_that_reaches_no_neighbour_still_waits_the_deadline(tmp_path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    inbox = RoundBarrier(lambda round_index: (1, 2), journal)
    await inbox.collect(0, 0.3, patience_s=3600.0, fates=NeighbourFates(unreachable={1, 2}))
    journal.close()
    drops = read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")
    assert sorted(d.peer for d in drops) == [1, 2]
    assert all(waited_s(d) >= 0.3 for d in drops), [d.reason for d in drops]


async def test_a_neighbour_that_acknowledged_is_waited_for_past_the_deadline(tmp_path):
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    inbox = RoundBarrier(lambda round_index: (1,), journal)
    collecting = asyncio.create_task(
        inbox.collect(0, 0.01, patience_s=3600.0, fates=NeighbourFates(alive={1})))
    await asyncio.sleep(0.2)  # well past the deadline: an unconfirmed neighbour would be dropped by now
    assert not collecting.done()
    await inbox.deliver(1, 0, np.ones(2))
    assert set(await asyncio.wait_for(collecting, timeout=10.0)) == {1}
    journal.close()
    assert not read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")


async def test_a_round_arms_one_timer_and_one_that_fires_early_does_not_close_it_early(tmp_path, monkeypatch):
    """Every value wakes the collector; the deadline's timer is armed once, not per wake. A timer that fires
    before its moment (the loop's clock resolution allows it) only gets armed again: no drop before the deadline."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    real_call_at = loop.call_at

    def early_call_at(when, callback, *args, context=None):
        if "_close_round" not in callback.__qualname__:  # another timer (the test's own timeout)
            return real_call_at(when, callback, *args, context=context)
        armed.append(when)
        return real_call_at(when - 0.05, callback, *args, context=context)  # fires 0.05 s early

    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    inbox = RoundBarrier(lambda round_index: (1, 2, 3, 4), journal)
    collecting = asyncio.create_task(inbox.collect(0, 0.3, patience_s=3600.0, fates=NeighbourFates()))
    monkeypatch.setattr(loop, "call_at", early_call_at)
    started = loop.time()
    for sender in (1, 2, 3):
        await inbox.deliver(sender, 0, np.ones(2))
    assert set(await asyncio.wait_for(collecting, timeout=10.0)) == {1, 2, 3}
    assert loop.time() - started >= 0.3 - 0.01
    assert len(armed) >= 2 and len(set(armed)) == 1  # the one deadline, armed again after firing early
    journal.close()
    (drop,) = read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")
    assert drop.peer == 4 and waited_s(drop) >= 0.3


async def test_a_neighbour_of_this_process_that_stopped_after_acknowledging_is_dropped_without_a_ping(tmp_path):
    """Its node says it stopped: the check runs on a timer, with no task of its own, and nobody is asked."""
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    inbox = RoundBarrier(lambda round_index: (1, 2), journal)
    asked: list[list[int]] = []
    tasks_seen: list[int] = []

    def here(peers):
        tasks_seen.append(len(asyncio.all_tasks()))
        return {1} & set(peers), []

    async def ask(peers):
        asked.append(list(peers))
        return set()

    collecting = asyncio.create_task(inbox.collect(0, 3600.0, patience_s=3600.0, fates=NeighbourFates(alive={1, 2}),
                                                   liveness=Liveness(here, ask)))
    await asyncio.sleep(0)
    tasks_before = len(asyncio.all_tasks())
    await inbox.deliver(2, 0, np.ones(2))
    assert set(await asyncio.wait_for(collecting, timeout=10.0)) == {2}
    assert asked == [] and tasks_seen == [tasks_before]  # one check, on the timer, and no task of its own
    journal.close()
    (drop,) = read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")
    assert drop.peer == 1 and waited_s(drop) < 5.0


async def test_the_liveness_checks_of_many_barriers_share_one_timer(tmp_path, monkeypatch):
    """A process of thousands of ids keeps one timer for their checks, not one each."""
    loop = asyncio.get_running_loop()
    armed: list[str] = []
    real_call_later = loop.call_later

    def counted_call_later(delay, callback, *args, context=None):
        if "Liveness" in getattr(callback, "__qualname__", ""):
            armed.append(callback.__qualname__)
        return real_call_later(delay, callback, *args, context=context)

    monkeypatch.setattr(loop, "call_later", counted_call_later)
    checked: list[int] = []

    def here(peers):
        checked.append(len(peers))
        return set(), []

    async def never_asked(peers):
        raise AssertionError(f"pinged {peers}: every neighbour here is of this process")

    journals = [Journal(tmp_path / str(v), viewlog_pb2.RunHeader(run_id="r", node_id=v)) for v in range(10)]
    barriers = [RoundBarrier(lambda round_index: (1,), journal) for journal in journals]
    collecting = [asyncio.create_task(barrier.collect(0, 3600.0, patience_s=3600.0, fates=NeighbourFates(alive={1}),
                                                      liveness=Liveness(here, never_asked))) for barrier in barriers]
    await asyncio.sleep(2.2 * PROBE_INTERVAL_S)
    for barrier in barriers:
        await barrier.deliver(1, 0, np.ones(2))
    await asyncio.wait_for(asyncio.gather(*collecting), timeout=10.0)
    assert len(checked) >= len(barriers) and set(checked) == {1}  # each checked, for its one waited-for neighbour
    assert 1 <= len(armed) <= 3  # one timer, re-armed each interval: not one per barrier
    for journal in journals:
        journal.close()


async def test_a_neighbour_elsewhere_is_pinged_and_dropped_once_it_no_longer_answers(tmp_path):
    """Asked at every check until the ping finds it dead: then dropped at once, long before the patience."""
    journal = Journal(tmp_path, viewlog_pb2.RunHeader(run_id="r", node_id=0))
    inbox = RoundBarrier(lambda round_index: (1,), journal)
    asked: list[list[int]] = []

    async def ask(peers):
        asked.append(list(peers))
        return set(peers) if len(asked) == 2 else set()  # it answers the first ping, not the second

    values = await asyncio.wait_for(
        inbox.collect(0, 0.01, patience_s=3600.0, fates=NeighbourFates(alive={1}),
                      liveness=Liveness(lambda peers: (set(), list(peers)), ask)), timeout=10.0)
    assert values == {} and asked == [[1], [1]]
    journal.close()
    (drop,) = read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")
    assert drop.peer == 1 and waited_s(drop) >= 2 * PROBE_INTERVAL_S


class SlowJournal(Journal):
    """A journal whose received records reach the disk only when the test lets them."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir, viewlog_pb2.RunHeader(run_id="r", node_id=0))
        self.release = asyncio.Event()

    async def received(self, peer, message) -> None:
        await self.release.wait()
        await super().received(peer, message)


async def test_a_round_does_not_close_while_one_of_its_values_is_being_logged(tmp_path):
    """Logged as received means used: the deadline passes during the write, the value still counts."""
    journal = SlowJournal(tmp_path)
    inbox = RoundBarrier(lambda round_index: (1, 2), journal)
    delivering = asyncio.create_task(inbox.deliver(1, 0, np.ones(2)))
    await asyncio.sleep(0.05)  # the value's place is reserved, its record is on its way
    with pytest.raises(Refusal) as duplicate:
        await inbox.deliver(1, 0, np.ones(2))
    assert duplicate.value.code == "ALREADY_EXISTS"
    collecting = asyncio.create_task(inbox.collect(0, 0.01, patience_s=0.02, fates=NeighbourFates()))
    await asyncio.sleep(0.2)  # far past the deadline and the patience
    assert not collecting.done()
    journal.release.set()
    await delivering
    assert set(await asyncio.wait_for(collecting, timeout=10.0)) == {1}
    journal.close()
    kinds = [r.WhichOneof("kind") for r in read_log(tmp_path / VIEW_LOG_NAME).records]
    assert kinds == ["header", "received", "drop_out"]  # 2 dropped, 1 received and used


def test_mix_moves_a_dropped_neighbours_weight_to_the_self_loop():
    row = {0: 0.5, 1: 0.25, 2: 0.25}
    own, from_one = np.array([4.0]), np.array([8.0])
    assert mix(own, {1: from_one}, row, 0)[0] == pytest.approx(0.75 * 4.0 + 0.25 * 8.0)


@pytest.mark.parametrize("accelerated", [True, False])
def test_an_absent_node_is_dropped_every_round_and_the_others_follow_the_realized_weights(tmp_path, accelerated):
    topology = ring_topology(accelerated=accelerated, round_deadline_s=3600.0)
    values = np.arange(12, dtype=float).reshape(6, 2) / 10
    outcomes = asyncio.run(run_inprocess(topology, values, tmp_path, lambda v: SimulationSampler(v), absent={2}))
    assert sorted(outcomes) == [0, 1, 3, 4, 5]
    # Recompute with numpy: node 2 never sends, its neighbours move its weight to themselves.
    omega = 1.0
    if accelerated:
        from node.mixing import chebyshev_omega
        omega = chebyshev_omega(topology.spectral_gap)
    previous, current = None, values.copy()
    for _ in range(topology.protocol.rounds):
        mixed = np.array([mix(current[v], {w: current[w] for w in topology.neighbours[v] if w != 2},
                              topology.weight_row(v), v) for v in range(6)])
        following = mixed if previous is None or not accelerated else (1 - omega) * previous + omega * mixed
        previous, current = current, following
    for v, outcome in outcomes.items():
        np.testing.assert_allclose(outcome.estimate, current[v], rtol=1e-12)
    for v in (1, 3):
        drops = read_log(tmp_path / f"node-{v}" / VIEW_LOG_NAME).of_kind("drop_out")
        assert sorted(d.round for d in drops) == list(range(topology.protocol.rounds))
        # Unreachable, so dropped at once each round rather than after the hour-long deadline.
        assert all(waited_s(d) < 60 for d in drops), [d.reason for d in drops]


def test_no_seed_or_private_value_reaches_the_view_log(tmp_path):
    seed = 918273645
    topology = ring_topology(sigma=0.5, rounds=2)
    values = np.full((6, 2), 0.123456789)
    asyncio.run(run_inprocess(topology, values, tmp_path, lambda v: SimulationSampler(seed + v)))
    for v in range(6):
        view = (tmp_path / f"node-{v}" / VIEW_LOG_NAME).read_bytes()
        private = read_log(tmp_path / f"node-{v}" / PRIVATE_LOG_NAME)
        noise = from_tensor(private.of_kind("noise")[0].value)
        assert str(seed + v).encode() not in view
        assert (seed + v).to_bytes(8, "little") not in view
        assert values[v].tobytes() not in view and noise.tobytes() not in view
        assert (tmp_path / f"node-{v}" / PRIVATE_LOG_NAME).stat().st_mode & 0o077 == 0
        assert private.of_kind("private_input")
        assert read_log(tmp_path / f"node-{v}" / VIEW_LOG_NAME).header.sampler_kind == "simulation"


def test_secure_sampler_adds_gaussian_noise_of_the_right_scale():
    sampler = SecureGaussianSampler()
    value = np.zeros(20000)
    noisy = sampler.perturb(value, 2.0)
    assert abs(noisy.std() - 2.0) < 0.05 and abs(noisy.mean()) < 0.05
    assert np.array_equal(sampler.perturb(np.arange(3.0), 0.0), np.arange(3.0))
    assert sampler.effective_sensitivity(1.0, 2.0) >= 1.0
