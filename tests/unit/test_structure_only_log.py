"""A structure-only copy of a view log: every record and its framing kept, not one payload byte, the header marked."""

from __future__ import annotations

import stat
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.errors import LogExistsError, LogFormatError
from node.viewlog import FRAME, MAGIC, TENSOR_FIELDS, ViewLogWriter, encode_record, read_log, write_structure_only

HEADER = viewlog_pb2.RunHeader(run_id="strip-test", protocol="muffliato-async", node_id=2, topology_digest="cd" * 32,
                               public_parameters_json='{"sigma": 1.0}', sampler_kind="secure", section="public",
                               started_unix=1700000000.5)
# Values whose float64 bytes must not survive the copy; none of them is 0, so no byte pattern is trivially common.
VALUES = {"sent": (0.1, -2.5, 3.75), "received": (1e-300, 3.0, -7.125), "rejected": (4.5, -0.03125, 9.0),
          "exchange": (0.6180339887, 2.718281828, -1.4142135), "final_output": (123.456, -654.321, 1.0 / 3.0)}


def vector(values: tuple[float, ...]) -> viewlog_pb2.Tensor:
    return to_tensor(np.array(values))


def body() -> list[viewlog_pb2.Record]:
    """Every public record kind, each payload a value of VALUES, and a signal whose payload is empty."""
    return [
        viewlog_pb2.Record(sent=viewlog_pb2.MessageSent(peer=1, kind="exchange.propose", exchange_id="2-1", sequence=1,
                                                        payload=vector(VALUES["sent"]), delivered=True, attempts=2)),
        viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(peer=1, kind="exchange.accept", exchange_id="2-1",
                                                                sequence=4, payload=vector(VALUES["received"]))),
        viewlog_pb2.Record(exchange=viewlog_pb2.ExchangeEvent(exchange_id="2-1", peer=1, sequence=1,
                                                              role="initiator", phase="committed",
                                                              value_after=vector(VALUES["exchange"]))),
        viewlog_pb2.Record(sent=viewlog_pb2.MessageSent(peer=1, kind="exchange.commit", exchange_id="2-1", sequence=1,
                                                        payload=to_tensor(np.zeros(0)), delivered=True, attempts=1)),
        viewlog_pb2.Record(rejected=viewlog_pb2.Rejected(claimed_sender=3, status_code="FAILED_PRECONDITION",
                                                         detail="exchange closed", kind="exchange.propose",
                                                         exchange_id="3-8", sequence=8,
                                                         payload=vector(VALUES["rejected"]))),
        viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=3, round=2, reason="deadline")),
        viewlog_pb2.Record(token=viewlog_pb2.TokenCustody(token_id="t0", hop=4, phase="received", peer=1)),
        viewlog_pb2.Record(final_output=viewlog_pb2.FinalOutput(value=vector(VALUES["final_output"]),
                                                                rounds_completed=6)),
    ]


def write_full(path: Path) -> list[viewlog_pb2.Record]:
    with ViewLogWriter(path, HEADER) as writer:
        writer.append_many(body())
    return read_log(path).records


def packed(values: tuple[float, ...]) -> list[bytes]:
    return [struct.pack("<d", value) for value in values]


def test_the_copy_keeps_every_record_and_no_payload_byte(tmp_path: Path) -> None:
    full = write_full(tmp_path / "view.log")
    copy = tmp_path / "copy" / "view.log"
    copy.parent.mkdir()
    write_structure_only(tmp_path / "view.log", copy)

    data = copy.read_bytes()
    assert all(piece not in data for values in VALUES.values() for piece in packed(values))
    assert all(piece in (tmp_path / "view.log").read_bytes() for values in VALUES.values() for piece in packed(values))
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    contents = read_log(copy)  # every frame's length and CRC-32 checked
    assert contents.damage is None and not contents.unknown
    assert contents.header.payloads_stripped and not full[0].header.payloads_stripped
    marked = viewlog_pb2.RunHeader()
    marked.CopyFrom(HEADER)
    marked.payloads_stripped = True
    assert contents.header == marked
    assert [r.logged_unix for r in contents.records] == [r.logged_unix for r in full]
    stripped_kinds = []
    for before, after in zip(full[1:], contents.records[1:], strict=True):
        kind = before.WhichOneof("kind")
        assert after.WhichOneof("kind") == kind
        entry, copied = getattr(before, kind), getattr(after, kind)
        for field, value in entry.ListFields():
            if field.message_type is not viewlog_pb2.Tensor.DESCRIPTOR:
                assert getattr(copied, field.name) == value, (kind, field.name)
                continue
            tensor = getattr(copied, field.name)
            assert tensor.data == b"" and list(tensor.shape) == list(value.shape)
            assert tensor.stripped_bytes == 8 * int(np.prod(value.shape))
            stripped_kinds.append((kind, tensor.stripped_bytes))
    assert stripped_kinds == [("sent", 24), ("received", 24), ("exchange", 24), ("sent", 0), ("rejected", 24),
                              ("final_output", 24)]


def test_a_copy_of_a_copy_is_the_same_copy(tmp_path: Path) -> None:
    write_full(tmp_path / "view.log")
    write_structure_only(tmp_path / "view.log", tmp_path / "once.log")
    write_structure_only(tmp_path / "once.log", tmp_path / "twice.log")
    assert (tmp_path / "once.log").read_bytes() == (tmp_path / "twice.log").read_bytes()


def damaged_tail(kind: str, record: viewlog_pb2.Record) -> bytes:
    """Bytes appended after intact records that read as damage of `kind`, each holding the record's payload bytes."""
    frame = encode_record(record)
    body = frame[FRAME.size:]
    return {
        "torn_tail": frame[:-5],
        "bad_checksum": FRAME.pack(len(body), zlib.crc32(body) ^ 1) + body,
        "oversized_length": FRAME.pack(0xFFFFFFFF, 0) + body,
        "undecodable": FRAME.pack(len(body) + 1, zlib.crc32(body + b"\xff")) + body + b"\xff",
    }[kind]


@pytest.mark.parametrize("kind", ["torn_tail", "bad_checksum", "oversized_length", "undecodable"])
def test_a_damaged_log_is_copied_damaged_the_same_way_without_its_damaged_bytes(tmp_path: Path, kind: str) -> None:
    full = write_full(tmp_path / "view.log")
    late = viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(peer=3, round=9, payload=vector((8.25, -6.5))))
    with open(tmp_path / "view.log", "ab") as log:
        log.write(damaged_tail(kind, late))
    assert read_log(tmp_path / "view.log").damage.kind == kind
    source = write_structure_only(tmp_path / "view.log", tmp_path / "copy.log")
    copied = read_log(tmp_path / "copy.log")
    assert source.damage.kind == copied.damage.kind == kind
    assert len(copied.records) == len(full)
    assert all(piece not in (tmp_path / "copy.log").read_bytes() for piece in packed((8.25, -6.5)))


def test_only_a_view_log_with_its_header_is_copied_and_never_over_a_file(tmp_path: Path) -> None:
    private = viewlog_pb2.RunHeader()
    private.CopyFrom(HEADER)
    private.section = "private"
    with ViewLogWriter(tmp_path / "private.log", private):
        pass
    with pytest.raises(LogFormatError, match="private log: only view logs"):
        write_structure_only(tmp_path / "private.log", tmp_path / "copy.log")
    (tmp_path / "headless.log").write_bytes(MAGIC + encode_record(body()[0]))
    with pytest.raises(LogFormatError, match="no run header"):
        write_structure_only(tmp_path / "headless.log", tmp_path / "copy.log")
    assert not (tmp_path / "copy.log").exists()
    write_full(tmp_path / "view.log")
    (tmp_path / "taken.log").write_bytes(b"kept")
    with pytest.raises(LogExistsError, match="never overwritten"):
        write_structure_only(tmp_path / "view.log", tmp_path / "taken.log")
    assert (tmp_path / "taken.log").read_bytes() == b"kept"


def test_every_payload_of_the_schema_is_a_field_the_copy_strips() -> None:
    """Walk the record schema: every Tensor anywhere is a direct field of a record kind, listed in TENSOR_FIELDS."""
    found: dict[str, list[str]] = {}

    def walk(descriptor, path: tuple[str, ...]) -> None:
        for field in descriptor.fields:
            if field.message_type is viewlog_pb2.Tensor.DESCRIPTOR:
                assert len(path) == 1, f"a payload nested at {'.'.join((*path, field.name))}"
                found.setdefault(path[0], []).append(field.name)
            elif field.message_type is not None:
                walk(field.message_type, (*path, field.name))

    for kind in viewlog_pb2.Record.DESCRIPTOR.oneofs_by_name["kind"].fields:
        walk(kind.message_type, (kind.name,))
    assert {kind: list(names) for kind, names in TENSOR_FIELDS.items() if names} == found
    assert set(found) == {"sent", "received", "rejected", "final_output", "private_input", "noise", "exchange",
                          "canaries"}
