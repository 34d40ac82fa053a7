"""Fuzzing the Peer servicer through a real grpc.aio server: hostile input is refused cleanly.

Hypothesis draws every field of every message (run id, protocol, sender, round, sequence,
exchange id, shape, payload), the layout of the chunk stream, and raw bytes that are not a
Chunk at all. An independent model of the validation rules (`expected_outcome`) says which
status each stream must get, so the test checks the order and the codes of the checks, not
only that nothing crashed. After every call the view log must read back undamaged with
exactly one new record (`received` when accepted, `rejected` with the model's code when
refused), the round inbox must have changed only on acceptance, and the server must still
accept a valid message. tests/cluster/test_bad_input.py sends fixed bad messages to a real
node process; this file covers the space between them.
"""

from __future__ import annotations

import asyncio
import math
import struct
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import networkx as nx
import numpy as np
import pytest
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.topology.build import build_topology
from netdp.v1 import peer_pb2, viewlog_pb2
from node.codec import pack
from node.idset import IdRanges
from node.journal import MAX_LOGGED_FIELD_CHARS, Journal, bounded_text
from node.mailboxes.round_barrier import NeighbourFates, RoundBarrier
from node.message import GOSSIP as GOSSIP_KIND
from node.message import MAX_FIELD_CHARS
from node.protocols.muffliato import MuffliatoParams
from node.receiver import Receiver
from node.refusal import Refusal
from node.transport.grpc_server import max_chunk_count, start_server, stop_server
from node.viewlog import VIEW_LOG_NAME, read_log
from tests.fuzz_builders import bit_sets, flip_bits

RUN_ID = "fuzz-run"
PROTOCOL = "muffliato"
NODE = 0
DIMENSION = 3
TOPOLOGY = build_topology(
    nx.cycle_graph(6), graph_name="ring", run_id=RUN_ID,
    protocol=MuffliatoParams(sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=8, dimension=DIMENSION),
)
NEIGHBOURS = TOPOLOGY.neighbours[NODE]
STRANGERS = tuple(v for v in range(TOPOLOGY.n) if v not in NEIGHBOURS)  # the node itself included
PAYLOAD_BYTES = 8 * DIMENSION
# Each example's node has closed round 0 (values for it are replays); rounds 1..2 are open.
OPEN_ROUND = 1
OPEN_ROUNDS = (OPEN_ROUND, OPEN_ROUND + 1)
GOSSIP = "/netdp.v1.Peer/Gossip"
DELIVER = "/netdp.v1.Peer/Deliver"
# A status detail is a line a person reads; attacker-sized echoes would also break gRPC's metadata limit.
MAX_DETAIL_CHARS = 500
UINT32_MAX, UINT64_MAX = 2**32 - 1, 2**64 - 1
FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

Slot = tuple[int, int]  # (sender, round)


# --- the model: what the node must answer, computed from the bytes alone ----------------------


@dataclass(frozen=True)
class Outcome:
    """The status a stream must get and, when refused, the claim its `rejected` record holds."""

    code: str  # "OK" or a gRPC status code name
    claimed_sender: int = -1  # -1 when the refusal comes before any envelope was read
    round: int = 0


def envelope_verdict(envelope: peer_pb2.Envelope, identity: int | None) -> str | None:
    """The refusal code of an envelope on its own, in the order the node checks it; None if fine."""
    if identity is not None and identity != envelope.sender:  # the certificate first: it must name the sender
        return "PERMISSION_DENIED"
    if any(len(getattr(envelope, name)) > limit for name, limit in MAX_FIELD_CHARS.items()):
        return "INVALID_ARGUMENT"
    if envelope.run_id != RUN_ID or envelope.protocol != PROTOCOL:
        return "FAILED_PRECONDITION"
    if envelope.sender >= TOPOLOGY.n:
        return "PERMISSION_DENIED"
    if envelope.sender not in NEIGHBOURS:
        return "PERMISSION_DENIED"
    if list(envelope.shape) != [DIMENSION] or envelope.sequence != 0 or envelope.exchange_id != "":
        return "INVALID_ARGUMENT"
    return None


def expected_outcome(stream: Sequence[bytes], stored: set[Slot], identity: int | None) -> Outcome:
    """Replay the validation rules over the wire bytes of a stream (each item one gRPC message)."""
    envelope: peer_pb2.Envelope | None = None
    payload = b""

    def refused(code: str) -> Outcome:
        return Outcome(code) if envelope is None else Outcome(code, envelope.sender, envelope.round)

    for wire in stream:
        try:
            chunk = peer_pb2.Chunk.FromString(wire)
        except DecodeError:
            return refused("INVALID_ARGUMENT")
        if envelope is None:
            if not chunk.HasField("envelope"):
                return refused("INVALID_ARGUMENT")
            envelope = chunk.envelope
            code = envelope_verdict(envelope, identity)
            if code is not None:
                return refused(code)
        elif chunk.HasField("envelope"):
            return refused("INVALID_ARGUMENT")  # only the first chunk carries the envelope
        payload += chunk.data
        if len(payload) > PAYLOAD_BYTES:
            return refused("RESOURCE_EXHAUSTED")
    if envelope is None:
        return refused("INVALID_ARGUMENT")
    if len(payload) != PAYLOAD_BYTES or not all(map(math.isfinite, struct.unpack(f"<{DIMENSION}d", payload))):
        return refused("INVALID_ARGUMENT")
    if envelope.round < OPEN_ROUND:
        return refused("FAILED_PRECONDITION")
    if envelope.round > OPEN_ROUNDS[-1]:
        return refused("OUT_OF_RANGE")
    if (envelope.sender, envelope.round) in stored:
        return refused("ALREADY_EXISTS")
    return Outcome("OK")


# --- strategies ------------------------------------------------------------------------------

ENVELOPE_FIELDS = ("run_id", "protocol", "sender", "round", "sequence", "exchange_id", "shape")
VALID_FIELDS: dict[str, st.SearchStrategy] = {
    "run_id": st.just(RUN_ID),
    "protocol": st.just(PROTOCOL),
    "sender": st.sampled_from(NEIGHBOURS),
    "round": st.sampled_from(OPEN_ROUNDS),
    "sequence": st.just(0),
    "exchange_id": st.just(""),
    "shape": st.just([DIMENSION]),
}
huge_text = st.text(min_size=1, max_size=3).map(lambda piece: piece * 4000)
HOSTILE_FIELDS: dict[str, st.SearchStrategy] = {
    "run_id": st.one_of(st.just(""), st.text(max_size=12), st.just(RUN_ID.upper()), huge_text),
    "protocol": st.one_of(st.just(""), st.text(max_size=12), st.just("token-ring"), huge_text),
    "sender": st.one_of(st.sampled_from(STRANGERS), st.integers(TOPOLOGY.n, UINT32_MAX)),
    "round": st.one_of(st.integers(0, OPEN_ROUND - 1), st.integers(OPEN_ROUNDS[-1] + 1, UINT64_MAX)),
    "sequence": st.integers(1, UINT64_MAX),
    "exchange_id": st.text(min_size=1, max_size=12),
    "shape": st.one_of(
        st.lists(st.integers(0, UINT32_MAX), max_size=5).filter(lambda shape: shape != [DIMENSION]),
        st.sampled_from([[], [0], [DIMENSION, 1], [1, DIMENSION], [UINT32_MAX], [1] * 50_000]),
    ),
}
finite_floats = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True)
valid_payloads = st.lists(finite_floats, min_size=DIMENSION, max_size=DIMENSION).map(lambda v: pack(np.array(v))[0])
hostile_payloads = st.one_of(
    st.lists(st.floats(), min_size=DIMENSION, max_size=DIMENSION).map(lambda v: pack(np.array(v))[0]),
    st.lists(st.sampled_from([math.nan, math.inf, -math.inf]), min_size=1, max_size=DIMENSION)
    .map(lambda bad: pack(np.array([*bad, *[0.0] * (DIMENSION - len(bad))]))[0]),
    st.binary(max_size=2 * PAYLOAD_BYTES),  # short, long, odd lengths
    st.integers(PAYLOAD_BYTES + 1, 1 << 16).map(bytes),  # oversized
)
CLAIMS = (*ENVELOPE_FIELDS, "payload", "identity")


@dataclass(frozen=True)
class Probe:
    """What one example sends: gRPC messages as wire bytes, and the caller's authenticated identity."""

    stream: list[bytes]
    identity: int | None = None  # None: plain-text mode, the node knows no identity
    unary: bool = False  # a one-message stream sent as the unary Deliver call instead of Gossip


@dataclass(frozen=True)
class Claim:
    """One message's content before it is cut into chunks."""

    envelope: peer_pb2.Envelope
    payload: bytes
    identity: int | None


@st.composite
def claims(draw: st.DrawFn, counts: Sequence[int] = (0, 1, 1, 1, 2)) -> Claim:
    """A message and its caller's identity with some parts hostile (how many: drawn from `counts`)."""
    count = draw(st.sampled_from(counts))
    broken = draw(st.sets(st.sampled_from(CLAIMS), min_size=count, max_size=count))
    envelope = peer_pb2.Envelope(**{
        name: draw(HOSTILE_FIELDS[name] if name in broken else VALID_FIELDS[name]) for name in ENVELOPE_FIELDS
    })
    payload = draw(hostile_payloads if "payload" in broken else valid_payloads)
    if "identity" in broken:  # a TLS identity that is a neighbour, but not the one the envelope claims
        identity = draw(st.sampled_from([v for v in NEIGHBOURS if v != envelope.sender]))
    else:
        identity = draw(st.sampled_from([None, envelope.sender] if envelope.sender in NEIGHBOURS else [None]))
    return Claim(envelope, payload, identity)


@st.composite
def pieces(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """`data` cut at drawn offsets (empty pieces allowed); always at least one piece."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    bounds = [0, *cuts, len(data)]
    return [data[start:stop] for start, stop in zip(bounds, bounds[1:])]


def framed(envelope: peer_pb2.Envelope, parts: Sequence[bytes]) -> list[bytes]:
    """The well-formed layout: the envelope in the first chunk only."""
    return [peer_pb2.Chunk(envelope=envelope, data=part).SerializeToString() if index == 0
            else peer_pb2.Chunk(data=part).SerializeToString() for index, part in enumerate(parts)]


@st.composite
def well_framed(draw: st.DrawFn) -> Probe:
    """Every envelope field, the payload and the caller's identity fuzzed; the chunk layout is the sender's."""
    claim = draw(claims())
    stream = framed(claim.envelope, draw(pieces(claim.payload)))
    return Probe(stream, claim.identity, unary=len(stream) == 1 and draw(st.booleans()))


@st.composite
def odd_layouts(draw: st.DrawFn) -> Probe:
    """Mostly valid content in a hostile layout: no envelope first, repeated envelopes, no chunks."""
    claim = draw(claims(counts=(0, 0, 1)))
    layout = draw(st.sampled_from(["split", "envelope_late", "no_envelope", "envelope_repeated", "empty"]))
    if layout == "empty":
        return Probe([], claim.identity)
    chunks = [peer_pb2.Chunk(data=part) for part in draw(pieces(claim.payload))]
    if layout == "split":  # one chunk per byte past the size limit (then the rest), and an empty one somewhere
        singles = min(len(claim.payload), PAYLOAD_BYTES + 1)
        chunks = [peer_pb2.Chunk(data=claim.payload[i : i + 1]) for i in range(singles)] or [peer_pb2.Chunk()]
        if len(claim.payload) > singles:
            chunks.append(peer_pb2.Chunk(data=claim.payload[singles:]))
        chunks.insert(draw(st.integers(1, len(chunks))), peer_pb2.Chunk())
    if layout in ("split", "envelope_repeated"):
        chunks[0].envelope.CopyFrom(claim.envelope)
    if layout == "envelope_late":
        chunks.insert(draw(st.integers(1, len(chunks))), peer_pb2.Chunk(envelope=claim.envelope))
    if layout == "envelope_repeated":
        again = draw(st.one_of(st.just(claim.envelope), claims(counts=(0, 1)).map(lambda c: c.envelope)))
        chunks.insert(draw(st.integers(1, len(chunks))), peer_pb2.Chunk(envelope=again))
    return Probe([chunk.SerializeToString() for chunk in chunks], claim.identity)


@st.composite
def garbled(draw: st.DrawFn) -> Probe:
    """Streams where some gRPC messages are arbitrary or bit-flipped bytes rather than a Chunk."""
    probe = draw(well_framed())
    stream = list(probe.stream)
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, len(stream)))
        if position < len(stream) and stream[position] and draw(st.booleans()):
            stream[position] = flip_bits(stream[position], draw(bit_sets(len(stream[position]))))
        else:
            stream.insert(position, draw(st.binary(min_size=1, max_size=40)))
    return Probe(stream, probe.identity, unary=len(stream) == 1 and draw(st.booleans()))


# --- a live node -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveNode:
    """A Receiver behind a real gRPC server, with its view log."""

    receiver: Receiver
    inbox: RoundBarrier
    journal: Journal
    address: str
    log_path: Path


@asynccontextmanager
async def live_node(log_dir: Path, identity: int | None,
                    journal_class: type[Journal] = Journal) -> AsyncIterator[LiveNode]:
    """Node 0 with round 0 closed and one value of round 1 stored, serving on a free loopback port.

    `identity` stands for the mutual-TLS identity of every caller (None: plain-text mode).
    """
    journal = journal_class(log_dir, viewlog_pb2.RunHeader(run_id=RUN_ID, protocol=PROTOCOL, node_id=NODE))
    receiver = Receiver(TOPOLOGY, NODE, journal)
    inbox = RoundBarrier(lambda round_index: TOPOLOGY.neighbours[NODE], journal)
    receiver.register(GOSSIP_KIND, inbox.handle, scheme="round", payload=True)
    await inbox.collect(0, 0.0, patience_s=0.0, fates=NeighbourFates())
    await inbox.deliver(next(v for v in NEIGHBOURS if v != identity), OPEN_ROUND, np.full(DIMENSION, 0.5))
    address = f"127.0.0.1:{free_loopback_ports(1)[0]}"
    certified = None if identity is None else IdRanges.of({identity})
    server, health = await start_server({NODE: receiver}, address, credentials=None,
                                        authenticate=None if certified is None else lambda _context: certified,
                                        chunk_bytes=TOPOLOGY.network.chunk_bytes)
    try:
        yield LiveNode(receiver, inbox, journal, address, log_dir / VIEW_LOG_NAME)
    finally:
        await stop_server(server, health, 0)
        journal.close()


InboxState = tuple[int, dict[int, dict[int, bytes]]]


def inbox_state(inbox: RoundBarrier) -> InboxState:
    """The open round and every stored value (RoundBarrier exposes no accessor for the latter)."""
    return inbox.open_round, {r: {s: v.tobytes() for s, v in vals.items()} for r, vals in inbox._values.items() if vals}


def stored_slots(state: InboxState) -> set[Slot]:
    return {(sender, round_index) for round_index, values in state[1].items() for sender in values}


@dataclass(frozen=True)
class Answer:
    """How a call ended: its status, the status detail, and the receipt of an accepted message."""

    code: grpc.StatusCode
    detail: str
    receipt: peer_pb2.Receipt | None


def blocking_gossip(address: str, stream: Sequence[bytes], timeout_s: float, unary: bool) -> Answer:
    """One call of pre-serialized messages, so the server's own parsing sees these bytes.

    Gossip streams them; with `unary`, the one message goes in a Deliver call. A blocking
    client: the asyncio one may report INTERNAL instead of the server's status when the
    server ends a stream that the client is still writing (grpc/grpc#36066).
    """
    with grpc.insecure_channel(address) as channel:
        decode = peer_pb2.Receipt.FromString
        try:
            if unary:
                (single,) = stream
                receipt = channel.unary_unary(DELIVER, response_deserializer=decode)(single, timeout=timeout_s)
            else:
                receipt = channel.stream_unary(GOSSIP, response_deserializer=decode)(iter(stream), timeout=timeout_s)
        except grpc.RpcError as error:
            return Answer(error.code(), error.details() or "", None)
    return Answer(grpc.StatusCode.OK, "", receipt)


async def gossip(node: LiveNode, stream: Sequence[bytes], *, timeout_s: float = 10.0, unary: bool = False) -> Answer:
    """Call from a worker thread while the server keeps running on this event loop."""
    return await asyncio.to_thread(blocking_gossip, node.address, stream, timeout_s, unary)


def blocking_health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5.0).status


async def assert_still_serving(node: LiveNode, identity: int | None) -> None:
    """Health says SERVING and a valid value for a free slot is accepted and logged."""
    assert await asyncio.to_thread(blocking_health, node.address) == health_pb2.HealthCheckResponse.SERVING
    taken = stored_slots(inbox_state(node.inbox))
    senders = NEIGHBOURS if identity is None else (identity,)
    sender, round_index = next((s, r) for s in senders for r in OPEN_ROUNDS if (s, r) not in taken)
    before = len(read_log(node.log_path).records)
    assert (await gossip(node, message(sender, round_index))).code == grpc.StatusCode.OK
    assert [r.WhichOneof("kind") for r in read_log(node.log_path).records[before:]] == ["received"]


async def check_probe(probe: Probe) -> None:
    """Send one stream to a fresh node and check status, log and inbox against the model."""
    stream, identity = probe.stream, probe.identity
    with tempfile.TemporaryDirectory() as tmp:
        async with live_node(Path(tmp), identity) as node:
            log_before = read_log(node.log_path).records
            state_before = inbox_state(node.inbox)
            expected = expected_outcome(stream, stored_slots(state_before), identity)
            event(f"expected {expected.code} via {'Deliver' if probe.unary else 'Gossip'}")
            answer = await gossip(node, stream, unary=probe.unary)
            assert answer.code.name == expected.code, answer.detail
            log = read_log(node.log_path)
            assert log.damage is None
            assert log.records[: len(log_before)] == log_before
            added = log.records[len(log_before):]
            kind = "rejected" if answer.receipt is None else "received"
            assert [record.WhichOneof("kind") for record in added] == [kind]
            state = inbox_state(node.inbox)
            if answer.receipt is None:
                assert 0 < len(answer.detail) <= MAX_DETAIL_CHARS
                assert (added[0].rejected.status_code, added[0].rejected.claimed_sender, added[0].rejected.round) == (
                    expected.code, expected.claimed_sender, expected.round)
                assert state == state_before
            else:
                envelope = peer_pb2.Chunk.FromString(stream[0]).envelope
                payload = b"".join(peer_pb2.Chunk.FromString(wire).data for wire in stream)
                assert (answer.receipt.receiver, answer.receipt.round) == (NODE, envelope.round)
                got = added[0].received
                assert (got.peer, got.round, tuple(got.payload.shape), got.payload.data) == (
                    envelope.sender, envelope.round, (DIMENSION,), payload)
                state_before[1].setdefault(envelope.round, {})[envelope.sender] = payload
                assert state == state_before
            await assert_still_serving(node, identity)


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for every example of the module (each example's grpc.aio server runs in it)."""
    with asyncio.Runner() as loop_runner:
        yield loop_runner


def message(sender: int, round_index: int, **changes: object) -> list[bytes]:
    """A one-chunk message, valid unless `changes` (envelope fields, or `data`) say otherwise."""
    data = changes.pop("data", pack(np.arange(DIMENSION, dtype=np.float64))[0])
    fields = {"run_id": RUN_ID, "protocol": PROTOCOL, "sender": sender, "round": round_index, "shape": [DIMENSION]}
    return framed(peer_pb2.Envelope(**{**fields, **changes}), [data])


@FUZZ
@given(probe=well_framed())
@example(probe=Probe(message(NEIGHBOURS[1], OPEN_ROUNDS[-1])))  # OK
@example(probe=Probe(message(NEIGHBOURS[1], OPEN_ROUNDS[-1]), unary=True))  # OK, as one unary call
@example(probe=Probe(message(NEIGHBOURS[0], OPEN_ROUND)))  # ALREADY_EXISTS (stored before each example)
@example(probe=Probe(message(NEIGHBOURS[1], OPEN_ROUND - 1)))  # FAILED_PRECONDITION: a replay
@example(probe=Probe(message(NEIGHBOURS[1], OPEN_ROUNDS[-1] + 1)))  # OUT_OF_RANGE
@example(probe=Probe(message(NEIGHBOURS[1], OPEN_ROUND), NEIGHBOURS[0]))  # PERMISSION_DENIED: identity
@example(probe=Probe(message(NEIGHBOURS[1], OPEN_ROUND, data=bytes(PAYLOAD_BYTES + 1))))  # RESOURCE_EXHAUSTED
@example(probe=Probe(message(NEIGHBOURS[1], OPEN_ROUND, sequence=7)))  # INVALID_ARGUMENT: async field
def test_every_envelope_field_and_payload_is_validated_in_order(runner: asyncio.Runner, probe: Probe) -> None:
    runner.run(check_probe(probe))


@FUZZ
@given(probe=odd_layouts())
def test_chunk_layouts_other_than_envelope_first_are_refused(runner: asyncio.Runner, probe: Probe) -> None:
    runner.run(check_probe(probe))


@FUZZ
@given(probe=garbled())
@example(probe=Probe([b"\xff"]))
@example(probe=Probe([b"\xff"], unary=True))
@example(probe=Probe([*message(NEIGHBOURS[1], OPEN_ROUND, data=b""), b"\x12\x05\x00"]))  # torn second chunk
def test_bytes_that_are_not_a_chunk_are_refused_and_logged(runner: asyncio.Runner, probe: Probe) -> None:
    runner.run(check_probe(probe))


def test_a_message_over_grpcs_own_limit_ends_the_stream_before_it(runner: asyncio.Runner) -> None:
    """gRPC drops a message over 4 MiB and the servicer sees the stream end there (here: empty).

    The client gets gRPC's RESOURCE_EXHAUSTED; the node may log a refusal of what it saw (the
    call may also be cancelled before it does), and nothing is stored.
    """

    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with live_node(Path(tmp), None) as node:
                before, state = read_log(node.log_path).records, inbox_state(node.inbox)
                answer = await gossip(node, message(NEIGHBOURS[1], OPEN_ROUND, data=bytes(5 << 20)))
                assert answer.code == grpc.StatusCode.RESOURCE_EXHAUSTED and answer.detail
                log = read_log(node.log_path)
                assert log.damage is None and log.records[: len(before)] == before
                assert [(r.WhichOneof("kind"), r.rejected.status_code) for r in log.records[len(before):]] in (
                    [], [("rejected", "INVALID_ARGUMENT")])
                assert inbox_state(node.inbox) == state
                await assert_still_serving(node, None)

    runner.run(scenario())


class StallingJournal(Journal):
    """A journal on a disk that stalls: each append takes `stall_s` more in its worker thread."""

    stall_s = 0.0

    async def write(self, *records: viewlog_pb2.Record) -> None:
        await asyncio.to_thread(time.sleep, self.stall_s)
        await super().write(*records)


def test_a_call_cancelled_while_its_value_is_logged_still_stores_it(runner: asyncio.Runner) -> None:
    """The client's deadline passes during the fsync of the `received` record: the value is still used.

    Otherwise it would be logged as received, then dropped by the round barrier: two records
    that contradict each other, and a view the auditor cannot trust.
    """

    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with live_node(Path(tmp), None, StallingJournal) as node:
                journal = node.journal
                assert isinstance(journal, StallingJournal)
                before = len(read_log(node.log_path).records)
                journal.stall_s = 0.3
                answer = await gossip(node, message(NEIGHBOURS[1], OPEN_ROUND), timeout_s=0.05)
                assert answer.code == grpc.StatusCode.DEADLINE_EXCEEDED
                slot = (NEIGHBOURS[1], OPEN_ROUND)
                for _ in range(100):  # the delivery goes on after the call ended, or never completes
                    if slot in stored_slots(inbox_state(node.inbox)):
                        break
                    await asyncio.sleep(0.02)
                assert slot in stored_slots(inbox_state(node.inbox))
                assert [r.WhichOneof("kind") for r in read_log(node.log_path).records[before:]] == ["received"]

    runner.run(scenario())


def test_a_refusal_of_megabyte_fields_grows_the_log_by_a_bounded_amount(runner: asyncio.Runner) -> None:
    """A 3 MiB kind and a 0.5 MiB token id are refused on their length; the record keeps a prefix and a digest."""

    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with live_node(Path(tmp), None) as node:
                size = node.log_path.stat().st_size
                stream = message(NEIGHBOURS[1], OPEN_ROUND, kind="k" * (3 << 20), token_id="t" * (1 << 19))
                answer = await gossip(node, stream)
                assert answer.code == grpc.StatusCode.INVALID_ARGUMENT and "kind" in answer.detail
                assert node.log_path.stat().st_size - size < 2048
                refused = read_log(node.log_path).records[-1].rejected
                assert refused.kind.startswith("k" * MAX_LOGGED_FIELD_CHARS + "...sha256:")
                assert refused.kind != bounded_text("k" * (3 << 20) + "x")  # the digest tells them apart
                assert len(refused.token_id) <= MAX_LOGGED_FIELD_CHARS + 74
                await assert_still_serving(node, None)

    runner.run(scenario())


def test_a_stream_of_empty_chunks_is_refused_after_the_chunk_limit(runner: asyncio.Runner) -> None:
    """100 000 empty chunks: refused as soon as the stream passes the most chunks a message may have."""

    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with live_node(Path(tmp), None) as node:
                first = message(NEIGHBOURS[1], OPEN_ROUND, data=b"")
                empty = peer_pb2.Chunk().SerializeToString()
                started = time.perf_counter()
                answer = await gossip(node, first + [empty] * 100_000)
                elapsed = time.perf_counter() - started
                assert answer.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "chunks" in answer.detail
                assert elapsed < 3.0, elapsed
                limit = max_chunk_count(PAYLOAD_BYTES, TOPOLOGY.network.chunk_bytes)
                assert [(r.WhichOneof("kind"), r.rejected.detail) for r in read_log(node.log_path).records[-1:]] == [
                    ("rejected", f"a message has at most {limit} chunks")]
                await assert_still_serving(node, None)

    runner.run(scenario())


def hammer(address: str, stop: threading.Event) -> list[Answer]:
    """Send valid and replayed values until `stop` is set or the server is gone; every answer, in order."""
    answers: list[Answer] = []
    index = 0
    while not stop.is_set():
        sender, round_index = NEIGHBOURS[index % len(NEIGHBOURS)], OPEN_ROUNDS[index // len(NEIGHBOURS) % 2]
        answers.append(blocking_gossip(address, message(sender, round_index), 2.0, unary=index % 2 == 0))
        if answers[-1].code == grpc.StatusCode.UNAVAILABLE and "stopped" not in answers[-1].detail:
            break  # the server no longer listens
        index += 1
    return answers


def test_messages_during_shutdown_are_answered_cleanly(runner: asyncio.Runner) -> None:
    """The server stops accepting before the view log closes (as a node process shuts down), so a message
    arriving meanwhile gets a clean status, never UNKNOWN with a local path; and a node whose log is closed
    refuses whatever still reaches it with UNAVAILABLE, unread."""

    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            journal = Journal(Path(tmp) / "late", viewlog_pb2.RunHeader(run_id=RUN_ID, protocol=PROTOCOL))
            receiver = Receiver(TOPOLOGY, NODE, journal)
            inbox = RoundBarrier(lambda round_index: TOPOLOGY.neighbours[NODE], journal)
            receiver.register(GOSSIP_KIND, inbox.handle, scheme="round", payload=True)
            address = f"127.0.0.1:{free_loopback_ports(1)[0]}"
            server, health = await start_server({NODE: receiver}, address, credentials=None, authenticate=None,
                                                chunk_bytes=TOPOLOGY.network.chunk_bytes)
            stop = threading.Event()
            sending = asyncio.ensure_future(asyncio.to_thread(hammer, address, stop))
            await asyncio.sleep(0.3)
            await stop_server(server, health, 0.5)  # the order a node process shuts down in
            journal.close()
            stop.set()
            answers = await sending
            codes = {answer.code for answer in answers}
            assert grpc.StatusCode.OK in codes and grpc.StatusCode.UNKNOWN not in codes, codes
            assert not any(tmp in answer.detail for answer in answers)
            assert read_log(Path(tmp) / "late" / VIEW_LOG_NAME).damage is None
            with pytest.raises(Refusal) as refused:  # anything that still reaches the closed node: refused unread
                envelope = peer_pb2.Chunk.FromString(message(NEIGHBOURS[0], OPEN_ROUND)[0]).envelope
                await receiver.accept(envelope, pack(np.zeros(DIMENSION))[0], None)
            assert refused.value.code == "UNAVAILABLE" and tmp not in refused.value.detail

    runner.run(scenario())
