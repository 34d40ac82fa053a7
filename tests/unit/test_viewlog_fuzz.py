"""Fuzzing the view-log reader: damage is reported where it starts, and never read as data.

Hypothesis writes random valid logs (a header, then any mix of sent, received, drop-out,
rejected and final-output records with random payloads) and damages them: cut at any byte,
one to three bits flipped anywhere, huge claimed lengths, junk appended, frames reordered,
duplicated, dropped or taken from another log. The reader may only raise LogFormatError
(bad magic); otherwise it returns a prefix of the records that were written and reports
damage whenever the bytes are not a whole log, so a flipped bit can never turn into a
silently different record list. Rearranged whole frames are individually valid and read
back as written; catching those is the replay's job (tests/accounting/test_replay_fuzz.py).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.errors import LogFormatError
from node.viewlog import FRAME, MAGIC, MAX_RECORD_BYTES, LogContents, ViewLogWriter, encode_record, read_log
from tests.fuzz_builders import bit_sets, flip_bits, frame_starts, log_bytes, log_frames, rearrangements

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
DETECTED_DAMAGE = {"bad_checksum", "oversized_length", "torn_tail"}
UINT32, UINT64 = st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)

tensors = st.lists(st.floats(), max_size=4).map(lambda values: to_tensor(np.array(values, dtype=np.float64)))
texts = st.text(max_size=16)
headers = st.builds(
    viewlog_pb2.RunHeader, run_id=texts, protocol=texts, node_id=UINT32, topology_digest=texts,
    public_parameters_json=texts, sampler_kind=texts, section=st.sampled_from(["public", "private"]),
    started_unix=st.floats(allow_nan=False),
)
bodies = st.one_of(
    st.builds(viewlog_pb2.MessageSent, peer=UINT32, round=UINT64, sequence=UINT64, exchange_id=texts, payload=tensors,
              delivered=st.booleans(), attempts=UINT32, failure=texts).map(lambda m: viewlog_pb2.Record(sent=m)),
    st.builds(viewlog_pb2.MessageReceived, peer=UINT32, round=UINT64, sequence=UINT64, exchange_id=texts,
              payload=tensors).map(lambda m: viewlog_pb2.Record(received=m)),
    st.builds(viewlog_pb2.DropOut, peer=UINT32, round=UINT64, reason=texts)
    .map(lambda m: viewlog_pb2.Record(drop_out=m)),
    st.builds(viewlog_pb2.Rejected, claimed_sender=st.integers(-(2**63), 2**63 - 1), round=UINT64, status_code=texts,
              detail=texts).map(lambda m: viewlog_pb2.Record(rejected=m)),
    st.builds(viewlog_pb2.FinalOutput, value=tensors, rounds_completed=UINT64)
    .map(lambda m: viewlog_pb2.Record(final_output=m)),
)


@st.composite
def logs(draw: st.DrawFn, min_body: int = 0) -> list[viewlog_pb2.Record]:
    """A header record, then up to 8 records of any public kind, each with a wall-clock stamp."""
    records = [viewlog_pb2.Record(header=draw(headers)), *draw(st.lists(bodies, min_size=min_body, max_size=8))]
    for record in records:
        record.logged_unix = draw(st.floats(min_value=0.0, max_value=4e9))
    return records


def encode_log(records: list[viewlog_pb2.Record]) -> bytes:
    """What ViewLogWriter leaves on disk for these records (checked below)."""
    return log_bytes([encode_record(record) for record in records])


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One file every example overwrites (function-scoped tmp_path does not mix with @given)."""
    yield tmp_path_factory.mktemp("viewlog-fuzz") / "view.log"


def read_bytes_as_log(path: Path, data: bytes) -> LogContents:
    path.write_bytes(data)
    return read_log(path)


@settings(FUZZ, max_examples=20)  # every append is fsync'd
@given(records=logs())
def test_the_writer_leaves_exactly_the_bytes_these_tests_build(log_path: Path,
                                                               records: list[viewlog_pb2.Record]) -> None:
    log_path.unlink(missing_ok=True)
    with ViewLogWriter(log_path, records[0].header) as writer:
        for record in records[1:]:
            writer.append(record)  # restamps logged_unix
    contents = read_log(log_path)
    assert contents.damage is None
    assert log_path.read_bytes() == encode_log(contents.records)
    for written, read in zip(records, contents.records, strict=True):
        read.logged_unix = written.logged_unix
        assert read == written


@FUZZ
@given(records=logs(), data=st.data())
def test_a_cut_anywhere_keeps_every_whole_record_before_it(log_path: Path, records: list[viewlog_pb2.Record],
                                                           data: st.DataObject) -> None:
    whole = encode_log(records)
    starts = frame_starts(log_frames(whole))
    cut = data.draw(st.one_of(st.sampled_from(starts), st.integers(0, len(whole))), label="cut")
    contents = read_bytes_as_log(log_path, whole[:cut])
    complete = sum(1 for end in starts[1:] if end <= cut)
    assert contents.records == records[:complete]
    if cut == len(MAGIC):
        assert contents.damage is not None and contents.damage.kind == "missing_header"
    elif cut in starts:
        assert contents.damage is None
    else:
        assert contents.damage is not None and contents.damage.kind == "torn_tail"
        assert contents.damage.offset == (starts[complete] if cut > len(MAGIC) else 0)


@FUZZ
@given(records=logs(), data=st.data())
def test_flipped_bits_never_pass_as_a_different_log(log_path: Path, records: list[viewlog_pb2.Record],
                                                    data: st.DataObject) -> None:
    whole = encode_log(records)
    starts = frame_starts(log_frames(whole))
    bits = data.draw(bit_sets(len(whole)), label="bits")
    damaged = flip_bits(whole, bits)
    first = min(bits) // 8
    if first < len(MAGIC):
        with pytest.raises(LogFormatError, match="bad magic"):
            read_bytes_as_log(log_path, damaged)
        return
    contents = read_bytes_as_log(log_path, damaged)
    hit = sum(1 for start in starts[1:] if start <= first)  # index of the first frame with a flipped bit
    assert contents.records == records[:hit]
    assert contents.damage is not None
    assert contents.damage.kind in DETECTED_DAMAGE
    assert contents.damage.offset == starts[hit]


@FUZZ
@given(records=logs(), data=st.data())
def test_a_huge_claimed_length_is_reported_without_reading_or_allocating_it(
        log_path: Path, records: list[viewlog_pb2.Record], data: st.DataObject) -> None:
    frames = log_frames(encode_log(records))
    starts = frame_starts(frames)
    index = data.draw(st.integers(0, len(frames)), label="frame")  # len(frames): a new frame appended
    available = max(starts[-1] - starts[index] - FRAME.size, 0)  # bytes after the lying frame header
    claimed = data.draw(st.integers(available + 1, 2**32 - 1), label="claimed length")
    lying = FRAME.pack(claimed, 0) + (frames[index][FRAME.size :] if index < len(frames) else b"")
    damaged = log_bytes([*frames[:index], lying, *frames[index + 1 :]])
    log_path.write_bytes(damaged)
    tracemalloc.start()
    try:
        contents = read_log(log_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(damaged) + (1 << 20)
    assert contents.records == records[:index]
    assert contents.damage is not None
    assert contents.damage.kind == ("oversized_length" if claimed > MAX_RECORD_BYTES else "torn_tail")
    assert contents.damage.offset == starts[index]


@FUZZ
@given(records=logs(), junk=st.binary(min_size=1, max_size=64))
def test_junk_after_a_whole_log_is_damage_not_records(log_path: Path, records: list[viewlog_pb2.Record],
                                                      junk: bytes) -> None:
    whole = encode_log(records)
    contents = read_bytes_as_log(log_path, whole + junk)
    assert contents.records == records
    assert contents.damage is not None and contents.damage.offset == len(whole)


@FUZZ
@given(data=st.binary(max_size=200), magic=st.booleans())
def test_arbitrary_bytes_are_a_log_format_error_or_reported_damage(log_path: Path, data: bytes, magic: bool) -> None:
    try:
        contents = read_bytes_as_log(log_path, MAGIC + data if magic else data)
    except LogFormatError as error:
        assert not magic and "bad magic" in str(error)
        return
    assert contents.damage is not None or contents.header is not None


@FUZZ
@given(records=logs(min_body=1), foreign=logs(min_body=1), data=st.data())
def test_rearranged_and_foreign_frames_read_back_as_written(log_path: Path, records: list[viewlog_pb2.Record],
                                                            foreign: list[viewlog_pb2.Record],
                                                            data: st.DataObject) -> None:
    rearrangement = data.draw(rearrangements(len(records)), label="rearrangement")
    written = rearrangement.apply(records)
    if data.draw(st.booleans(), label="splice a foreign record"):
        written.insert(data.draw(st.integers(0, len(written)), label="at"),
                       data.draw(st.sampled_from(foreign), label="foreign record"))
    contents = read_bytes_as_log(log_path, encode_log(written))
    assert contents.records == written
    if written and written[0].HasField("header"):
        assert contents.damage is None
    else:
        assert contents.damage is not None and contents.damage.kind == "missing_header"
