"""The view log: every record kind round-trips, and damage is reported where it starts."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.errors import LogExistsError, LogFormatError
from node.viewlog import FRAME, MAGIC, ViewLogWriter, encode_record, read_log

HEADER = viewlog_pb2.RunHeader(
    run_id="log-test",
    protocol="muffliato",
    node_id=3,
    topology_digest="ab" * 32,
    public_parameters_json='{"sigma": 1.0}',
    sampler_kind="simulation",
    section="public",
    started_unix=1700000000.25,
)


def _vector(*values: float) -> viewlog_pb2.Tensor:
    return to_tensor(np.array(values))


def body_records() -> list[viewlog_pb2.Record]:
    """One record of every kind after the header, fresh on each call (the writer stamps what it appends)."""
    return [
        viewlog_pb2.Record(sent=viewlog_pb2.MessageSent(peer=1, round=0, payload=_vector(0.1, -2.5), delivered=True)),
        viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(peer=1, round=0, payload=_vector(1e-300, 3.0))),
        viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=2, round=1, reason="deadline")),
        viewlog_pb2.Record(rejected=viewlog_pb2.Rejected(claimed_sender=-1, round=1, status_code="INVALID_ARGUMENT")),
        viewlog_pb2.Record(final_output=viewlog_pb2.FinalOutput(value=_vector(0.5, 0.25), rounds_completed=2)),
        viewlog_pb2.Record(private_input=viewlog_pb2.PrivateInput(value=_vector(7.0, 8.0), clipped=True)),
        viewlog_pb2.Record(noise=viewlog_pb2.NoiseDraw(purpose="input", value=_vector(0.3, -0.3))),
    ]


def write_log(path: Path) -> list[viewlog_pb2.Record]:
    """Write the header and body_records(); return the records as they were stored."""
    with ViewLogWriter(path, HEADER) as writer:
        for record in body_records():
            writer.append(record)
    return read_log(path).records


def unstamped(records: list[viewlog_pb2.Record]) -> list[viewlog_pb2.Record]:
    """Copies without the wall-clock stamp, to compare contents."""
    copies = [viewlog_pb2.Record() for _ in records]
    for copy, record in zip(copies, records):
        copy.CopyFrom(record)
        copy.ClearField("logged_unix")
    return copies


def boundaries(records: list[viewlog_pb2.Record]) -> list[int]:
    """File offsets where each record starts, plus the end of the file."""
    offsets = [len(MAGIC)]
    for record in records:
        offsets.append(offsets[-1] + len(encode_record(record)))
    return offsets


def test_every_record_kind_round_trips_with_a_stamp(tmp_path: Path) -> None:
    path = tmp_path / "view.log"
    before = time.time()
    write_log(path)
    contents = read_log(path)
    assert contents.damage is None
    assert unstamped(contents.records) == [viewlog_pb2.Record(header=HEADER), *body_records()]
    assert contents.header == HEADER
    kinds = ["header", "sent", "received", "drop_out", "rejected", "final_output", "private_input", "noise"]
    assert [record.WhichOneof("kind") for record in contents.records] == kinds
    stamps = [record.logged_unix for record in contents.records]
    assert before <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= time.time()
    received = contents.of_kind("received")
    assert len(received) == 1
    assert from_tensor(received[0].payload).tolist() == [1e-300, 3.0]
    assert contents.of_kind("drop_out")[0].reason == "deadline"


def test_every_truncation_keeps_the_records_before_the_cut(tmp_path: Path) -> None:
    full = tmp_path / "full.log"
    records = write_log(full)
    data = full.read_bytes()
    starts = boundaries(records)
    assert starts[-1] == len(data)
    cut_file = tmp_path / "cut.log"
    for cut in range(len(data)):
        cut_file.write_bytes(data[:cut])
        contents = read_log(cut_file)
        complete = sum(1 for end in starts[1:] if end <= cut)
        assert contents.records == records[:complete], cut
        if cut == len(MAGIC):
            assert contents.damage is not None and contents.damage.kind == "missing_header"
        elif cut in starts:
            assert contents.damage is None, cut
        else:
            assert contents.damage is not None and contents.damage.kind == "torn_tail", cut
            assert contents.damage.offset == (starts[complete] if cut > len(MAGIC) else 0)


def test_a_flipped_bit_is_a_bad_checksum_after_intact_records(tmp_path: Path) -> None:
    path = tmp_path / "view.log"
    records = write_log(path)
    starts = boundaries(records)
    data = bytearray(path.read_bytes())
    damaged = 3
    data[starts[damaged] + FRAME.size + 2] ^= 0x10
    path.write_bytes(bytes(data))
    contents = read_log(path)
    assert contents.records == records[:damaged]
    assert contents.damage is not None
    assert contents.damage.kind == "bad_checksum"
    assert contents.damage.offset == starts[damaged]


def test_an_absurd_length_is_reported_not_allocated(tmp_path: Path) -> None:
    path = tmp_path / "view.log"
    records = write_log(path)
    path.write_bytes(path.read_bytes() + FRAME.pack(0xFFFFFFFF, 0))
    contents = read_log(path)
    assert contents.records == records
    assert contents.damage is not None and contents.damage.kind == "oversized_length"


def test_the_writer_never_overwrites_a_log(tmp_path: Path) -> None:
    path = tmp_path / "view.log"
    write_log(path)
    before = path.read_bytes()
    with pytest.raises(LogExistsError, match="never overwritten.*does not rejoin"):
        ViewLogWriter(path, HEADER)
    assert path.read_bytes() == before


def test_a_closed_writer_refuses_appends(tmp_path: Path) -> None:
    writer = ViewLogWriter(tmp_path / "view.log", HEADER)
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.append(body_records()[0])


def test_a_log_must_start_with_the_magic_and_a_header(tmp_path: Path) -> None:
    path = tmp_path / "view.log"
    path.write_bytes(b"NOTALOG!" + encode_record(viewlog_pb2.Record(header=HEADER)))
    with pytest.raises(LogFormatError, match="bad magic"):
        read_log(path)
    path.write_bytes(MAGIC + encode_record(body_records()[0]))
    contents = read_log(path)
    assert contents.header is None
    assert contents.records == body_records()[:1]
    assert contents.damage is not None and contents.damage.kind == "missing_header"
    with pytest.raises(LogFormatError, match="cannot read log"):
        read_log(tmp_path / "absent.log")


def test_a_record_kind_from_a_newer_version_is_skipped_and_listed_not_damage(tmp_path):
    """Field 99 of Record is no kind this version knows: the reader skips it and goes on."""
    path = tmp_path / "view.log"
    later = viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=1, round=2, reason="late"))
    with ViewLogWriter(path, HEADER) as log:
        log.append(viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=1, round=1, reason="first")))
    future_body = bytes([0x9A, 0x06, 1, 8])  # field 99 (varint key 0x9A 0x06), length 1, one byte
    frame = FRAME.pack(len(future_body), zlib.crc32(future_body)) + future_body
    with open(path, "ab") as handle:
        handle.write(frame + encode_record(later))
    contents = read_log(path)
    assert contents.damage is None
    assert [r.WhichOneof("kind") for r in contents.records] == ["header", "drop_out", "drop_out"]
    assert contents.records[-1].drop_out.reason == "late"
    assert len(contents.unknown) == 1 and "does not know" in contents.unknown[0][1]


def test_message_records_carry_their_kind_and_message_id_and_may_omit_the_peer(tmp_path):
    path = tmp_path / "view.log"
    anonymous = viewlog_pb2.MessageReceived(kind="token", token_id="t0", hop=7, payload=_vector(1.0))
    exchange = viewlog_pb2.ExchangeEvent(exchange_id="2-5", peer=4, sequence=5, role="initiator", phase="committed",
                                         value_after=_vector(0.5))
    with ViewLogWriter(path, HEADER) as log:
        log.append_many([viewlog_pb2.Record(received=anonymous), viewlog_pb2.Record(exchange=exchange)])
    received, event = read_log(path).records[1:]
    assert not received.received.HasField("peer") and (received.received.token_id, received.received.hop) == ("t0", 7)
    assert event.exchange == exchange
