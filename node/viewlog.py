"""The view log: the one module that writes and reads a node's durable record of its view.

File layout: an 8-byte magic, then records. Each record is framed as
``<u32 little-endian length><u32 little-endian CRC-32 of the body><body>`` where the body
is a serialized ``netdp.v1.Record``. A record of a kind this version does not know (written
by a newer netdp) is skipped and listed in ``unknown``, not reported as damage. Every append
(one record, or a batch written together) is flushed and fsync'd before it returns, so
anything a node acknowledged is on disk. A reader returns every complete record and reports,
never hides, a torn or corrupt tail.

A node keeps two logs: the public view (``view.log``: what it sent and received) and the
private section (``private.log``: its own input and noise), which the auditor only reads
in test and experiment mode. Both are private files (mode 0600): a view log holds the noisy
values the node received and sent, and two of them can give its raw input away.

A structure-only copy (`write_structure_only`) is a view log that keeps what the privacy
accounting reads (every record, its ids, peers, rounds, fates, refusals and payload shapes) and
none of the payload bytes: every Tensor keeps its shape and says how many bytes it held, and the
header says the payloads were stripped, so no reader takes it for a full log.

A log is never overwritten. A restarted node that may rejoin its run (personalized CD) appends
to its existing log instead (`read_resumable`, then a writer with `resume=`): the file must be
this run's log as the node would write it now (magic, the same header but its start time),
intact, and not finished. A torn tail (the unfinished write of the crash: never acknowledged,
nothing in it used) is moved aside to ``<log>.torn-at-<offset>`` before the first append, so
the reader's invariant holds: every complete record reads back, and nothing follows a torn one.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from google.protobuf.message import DecodeError

from netdp.v1 import viewlog_pb2
from node.errors import LogExistsError, LogFormatError, LogResumeError
from node.logfiles import LogHandlePool, shared_pool

MAGIC = b"NDPLOG\x01\n"
FRAME = struct.Struct("<II")
MAX_RECORD_BYTES = 1 << 30
VIEW_LOG_NAME = "view.log"
PRIVATE_LOG_NAME = "private.log"
LOG_MODE = 0o600  # every log, view logs too: only the node's operator reads them
LOG = logging.getLogger("netdp.node")

DamageKind = Literal["torn_tail", "bad_checksum", "oversized_length", "undecodable", "missing_header"]


@dataclass(frozen=True)
class LogDamage:
    """Where a log stops being readable and why; records before `offset` are intact."""

    kind: DamageKind
    offset: int
    detail: str


@dataclass
class LogContents:
    """Everything readable from one log file."""

    path: Path
    records: list[viewlog_pb2.Record] = field(default_factory=list)
    damage: LogDamage | None = None
    unknown: list[tuple[int, str]] = field(default_factory=list)  # (offset, what) of skipped records

    @property
    def header(self) -> viewlog_pb2.RunHeader | None:
        if self.records and self.records[0].WhichOneof("kind") == "header":
            return self.records[0].header
        return None

    def of_kind(self, kind: str) -> list[Any]:
        """The records of one kind ('sent', 'received', 'drop_out', ...), in log order."""
        return [getattr(r, kind) for r in self.records if r.WhichOneof("kind") == kind]


def encode_record(record: viewlog_pb2.Record) -> bytes:
    """One framed record, ready to append."""
    body = record.SerializeToString()
    return FRAME.pack(len(body), zlib.crc32(body)) + body


@dataclass(frozen=True)
class ResumableLog:
    """An existing log checked for a restarted node to append to (made only by `read_resumable`)."""

    contents: LogContents
    length: int  # bytes of its intact records; anything after them is a torn tail


def read_resumable(path: Path, header: viewlog_pb2.RunHeader) -> ResumableLog:
    """The log at `path`, once it is this run's log as a node with `header` would write it, intact up to a
    torn tail and not finished; LogResumeError (LogFormatError for a file that is no log) otherwise."""
    path = Path(path)
    if not path.is_file():
        raise LogResumeError(f"{path} does not exist: there is no run to rejoin from this log folder")
    contents = read_log(path)
    damage = contents.damage
    if damage is not None and damage.kind != "torn_tail":
        raise LogResumeError(f"{path} is damaged at byte {damage.offset} ({damage.detail}), not just torn by a "
                             "crash: it cannot be resumed")
    if contents.header is None:
        raise LogResumeError(f"{path} holds no complete run header: there is no run to rejoin from it")
    differences = _header_differences(contents.header, header)
    if differences:
        raise LogResumeError(f"{path} is not this node's log as it would start now: {'; '.join(differences)}; a "
                             "restarted node rejoins only as it first started (same topology, id, sampler and "
                             "budget)")
    if any(record.WhichOneof("kind") == "final_output" for record in contents.records):
        raise LogResumeError(f"{path} holds the node's final output: its run is over, there is nothing to resume")
    return ResumableLog(contents, path.stat().st_size if damage is None else damage.offset)


def _header_differences(logged: viewlog_pb2.RunHeader, wanted: viewlog_pb2.RunHeader) -> list[str]:
    """How two run headers differ, field by field (public parameters key by key); the start time is no part."""
    differences = []
    for name in ("run_id", "protocol", "node_id", "topology_digest", "sampler_kind", "section"):
        if getattr(logged, name) != getattr(wanted, name):
            differences.append(f"its {name} is {getattr(logged, name)!r}, this start's {getattr(wanted, name)!r}")
    if logged.public_parameters_json != wanted.public_parameters_json:
        before, now = _json_object(logged.public_parameters_json), _json_object(wanted.public_parameters_json)
        differences += [f"its {key} is {json.dumps(before.get(key), sort_keys=True)}, this start's "
                        f"{json.dumps(now.get(key), sort_keys=True)}"
                        for key in sorted(before.keys() | now.keys()) if before.get(key) != now.get(key)]
    return differences


def _json_object(text: str) -> dict[str, object]:
    """A header's public parameters; text that is no JSON object stands as itself, so it differs from any."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"public_parameters_json": text}


class ViewLogWriter:
    """Append-only writer that fsyncs every append. Safe to call from several threads."""

    def __init__(self, path: Path, header: viewlog_pb2.RunHeader, *, pool: LogHandlePool | None = None,
                 resume: ResumableLog | None = None) -> None:
        """A new log starting with `header`; with `resume` (from `read_resumable`), that existing log, appended to."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume is None and self.path.exists() and self.path.stat().st_size > 0:
            raise LogExistsError(
                f"{self.path} already exists; a log is never overwritten, and a restarted node does not "
                "rejoin its run (fresh noise would leak more, and its neighbours have dropped it): "
                "start a new run with a fresh log folder (a personalized-cd agent rejoins with --resume)")
        if resume is not None and resume.contents.path != self.path:
            raise ValueError(f"{resume.contents.path} was checked for resuming, not {self.path}")
        self._lock = threading.Lock()
        self._closed = False
        # The descriptor lives in a process-wide pool (node/logfiles.py): bounded open files whatever the
        # number of writers; it is reopened in append mode when the pool had closed it, never mid-append.
        self._pool = pool or shared_pool()
        self._flags = os.O_WRONLY | os.O_APPEND
        if resume is None:
            self._write_synced([MAGIC], create=True)
            self.append(viewlog_pb2.Record(header=header))
        else:
            os.chmod(self.path, LOG_MODE)  # a log an earlier netdp wrote readable by all becomes private too
            self._set_torn_tail_aside(resume.length)
        with self._pool.slot():
            _fsync_directory(self.path.parent)

    def _set_torn_tail_aside(self, length: int) -> None:
        """Move the bytes after the intact records to `<log>.torn-at-<length>` (kept, as private as the log;
        appended to, if an earlier crash tore the log at the same byte)."""
        with open(self.path, "rb") as log:
            log.seek(length)
            tail = log.read()
        if not tail:
            return
        aside = self.path.with_name(f"{self.path.name}.torn-at-{length}")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_APPEND, LOG_MODE)
        try:
            _write_all(fd, tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, length)
            os.fsync(fd)
        finally:
            os.close(fd)
        LOG.warning("%s: a torn tail of %d bytes at byte %d (the crash's unfinished write, never acknowledged) "
                    "was moved to %s before resuming", self.path, len(tail), length, aside.name)

    def append(self, record: viewlog_pb2.Record) -> None:
        """Stamp, write and fsync one record before returning."""
        self.append_many([record])

    def append_many(self, records: Sequence[viewlog_pb2.Record]) -> None:
        """Stamp and write several records, then fsync once: durable together before returning."""
        now = time.time()
        for record in records:
            record.logged_unix = now
        self._write_synced([encode_record(record) for record in records])

    def _write_synced(self, chunks: Sequence[bytes], *, create: bool = False) -> None:
        """Write the bytes in one call (all of them, even if the OS takes them in parts), then fsync."""
        data = b"".join(chunks)
        flags = self._flags | (os.O_CREAT if create else 0)
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path} is closed")
            with self._pool.descriptor(self, lambda: os.open(self.path, flags, LOG_MODE)) as fd:
                _write_all(fd, data)
                os.fsync(fd)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.discard(self)

    def __enter__(self) -> ViewLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_log(path: Path) -> LogContents:
    """Read every complete record; report the first damaged spot instead of raising."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LogFormatError(f"{path}: cannot read log ({exc.strerror})") from None
    if not data.startswith(MAGIC):
        if MAGIC.startswith(data):
            return LogContents(path, damage=LogDamage("torn_tail", 0, "file ends inside the magic"))
        raise LogFormatError(f"{path}: not a netdp view log (bad magic)")
    contents = LogContents(path)
    offset = len(MAGIC)
    while offset < len(data):
        damage = _read_one(data, offset, contents)
        if isinstance(damage, LogDamage):
            contents.damage = damage
            break
        offset = damage
    if contents.damage is None and contents.header is None:
        contents.damage = LogDamage("missing_header", len(MAGIC), "log holds no run header")
    return contents


def _read_one(data: bytes, offset: int, contents: LogContents) -> int | LogDamage:
    """Decode the record at `offset`; return the next offset or the damage found."""
    remaining = len(data) - offset
    if remaining < FRAME.size:
        return LogDamage("torn_tail", offset, f"{remaining} trailing bytes, less than a frame header")
    length: int
    checksum: int
    length, checksum = FRAME.unpack_from(data, offset)
    if length > MAX_RECORD_BYTES:
        return LogDamage("oversized_length", offset, f"frame claims {length} bytes")
    body_start = offset + FRAME.size
    if body_start + length > len(data):
        missing = body_start + length - len(data)
        return LogDamage("torn_tail", offset, f"last record is missing {missing} of {length} bytes")
    body = data[body_start : body_start + length]
    if zlib.crc32(body) != checksum:
        return LogDamage("bad_checksum", offset, "record checksum does not match its bytes")
    record = viewlog_pb2.Record()
    try:
        record.ParseFromString(body)
    except DecodeError as exc:
        return LogDamage("undecodable", offset, f"record does not decode ({exc})")
    if record.WhichOneof("kind") is None:
        contents.unknown.append((offset, f"a record of a kind this reader does not know ({length} bytes), skipped"))
    else:
        contents.records.append(record)
    return body_start + length


# The Tensor fields of each record kind's entry, found from the schema so that no payload field is missed.
TENSOR_FIELDS: dict[str, tuple[str, ...]] = {
    kind.name: tuple(field.name for field in kind.message_type.fields
                     if field.message_type is viewlog_pb2.Tensor.DESCRIPTOR)
    for kind in viewlog_pb2.Record.DESCRIPTOR.oneofs_by_name["kind"].fields if kind.message_type is not None
}
# The tail a structure-only copy ends with when its source's readable records end in damage of this kind: the
# copy is read as stopping where its source stops (a log that stops early is audited differently), and the
# damaged bytes themselves, which may hold a payload, are not copied.
DAMAGE_TAILS: dict[DamageKind, bytes] = {
    "torn_tail": FRAME.pack(1, 0),  # a frame whose body never came
    "bad_checksum": FRAME.pack(0, 1),  # an empty body, whose CRC-32 is 0
    "oversized_length": FRAME.pack(MAX_RECORD_BYTES + 1, 0),
    "undecodable": FRAME.pack(1, zlib.crc32(b"\xff")) + b"\xff",  # a varint that never ends
}


def strip_payloads(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
    """A copy of `record` whose payloads keep their shape and byte count but hold no data (a header is marked)."""
    stripped = viewlog_pb2.Record()
    stripped.CopyFrom(record)
    kind = stripped.WhichOneof("kind")
    entry = getattr(stripped, kind)
    for name in TENSOR_FIELDS[kind]:
        if entry.HasField(name):
            tensor = getattr(entry, name)
            tensor.stripped_bytes += len(tensor.data)
            tensor.ClearField("data")
    if kind == "header":
        entry.payloads_stripped = True
    return stripped


def write_structure_only(source: Path, destination: Path) -> LogContents:
    """Write the structure-only copy of the view log at `source` to the new file `destination` (mode 0600).

    Every readable record is kept in order with its logged time; a damaged end becomes the same kind of
    damage (`DAMAGE_TAILS`); records of a kind this reader does not know cannot be stripped and are left
    out. Returns what was read from `source`, so the caller can say what was damaged or left out.
    LogFormatError when `source` holds no run header or is a private log.
    """
    contents = read_log(source)
    header = contents.header
    if header is None:
        raise LogFormatError(f"{source}: no run header, so no log to copy")
    if header.section != "public":
        raise LogFormatError(f"{source} is a {header.section} log: only view logs are copied structure-only")
    chunks = [MAGIC, *(encode_record(strip_payloads(record)) for record in contents.records)]
    if contents.damage is not None:
        chunks.append(DAMAGE_TAILS[contents.damage.kind])
    destination = Path(destination)
    try:
        fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, LOG_MODE)
    except FileExistsError:
        raise LogExistsError(f"{destination} already exists; a log is never overwritten") from None
    try:
        _write_all(fd, b"".join(chunks))
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_directory(destination.parent)
    return contents


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte, even if the OS takes them in parts."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_directory(directory: Path) -> None:
    """Make the log file's directory entry durable too."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
