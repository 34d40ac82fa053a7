"""`netdp log show`: one node's view log as a human-readable listing or one JSON document.

For looking at a log without running the whole audit: the run header, every record in log
order (time offset, kind, peer, message id, payload size), a summary (records per kind and
per peer, drop-outs per neighbour, refusals, budget spent, final output) and the reader's
findings (a torn tail, a bad frame, a missing header), with the readable prefix still shown.

Payloads are shown by size only: a view log holds the noisy values of other nodes, which
`--values` prints. The private log (the node's own input and noise) is never opened unless
`--private` is given; then its draws are counted per purpose and listed with their values. A
structure-only copy (`netdp collect --structure-only`) lists the same, payload sizes included,
and has no value to print.

The JSON document (`--json`), whose field names are kept stable: `path`, `header` (run_id, protocol,
node_id, section, topology_digest, sampler_kind, started_unix, payloads_stripped, public_parameters;
null when unreadable), `records` (index in the log, offset_s, kind, peer, message {kind, round, sequence,
exchange_id, token_id, hop} for sent/received/rejected, payload {shape, bytes, floats, values (null
unless asked for, and in a structure-only copy)},
fields: the record's other fields), `summary` (records_by_kind with the header, peers, drop_outs,
refusals_by_status, budget, final_output), `findings` (severity, kind, node, detail: the auditor's
Finding), `values_shown`, `private_log_read` and `private` (path, header, records,
noise_by_purpose; null without --private).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from coordinator_tools.audit.records import Finding, payload_bytes, reader_findings
from netdp.v1 import viewlog_pb2
from node.codec import WIRE_DTYPE
from node.errors import ConfigError, LogFormatError
from node.message import ID_FIELDS, MessageId, kind_of
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, LogContents, read_log

# Records whose `kind` and id fields name a message; the other kinds' fields are listed as they are.
MESSAGE_RECORDS = frozenset({"sent", "received", "rejected"})
# Records of the private section: their values are shown only with --private, wherever they are found.
PRIVATE_RECORDS = frozenset({"private_input", "noise", "canaries"})
# Records that name the node at the other end (None when it is sender-anonymous or unknown).
PEER_RECORDS = frozenset(
    field.name for field in viewlog_pb2.Record.DESCRIPTOR.oneofs_by_name["kind"].fields
    if {"peer", "claimed_sender"} & set(field.message_type.fields_by_name))
HEADER_FIELDS = ("run_id", "protocol", "node_id", "section", "topology_digest", "sampler_kind", "started_unix",
                 "payloads_stripped")

FREE_TEXT_COLUMNS = frozenset({"value", "details", "values", "detail"})
# A listed cell is cut to this many characters (the payload values asked for with --values excepted): a log
# that holds a peer's megabyte-long string still lists in lines of bounded length.
MAX_CELL_CHARS = 240
UNCUT_COLUMNS = frozenset({"values"})

Document = dict[str, Any]
Row = Sequence[str]
Emit = Callable[[str, Row, Sequence[Row]], None]  # prints one titled table


# --- the listing as data ------------------------------------------------------------------------


def log_listing(path: Path, *, values: bool = False, private: bool = False) -> Document:
    """The JSON document of a node folder's (or a view.log file's) view log; `private` also reads private.log.

    Raises ConfigError for a missing path or a private log given as the view log, and
    LogFormatError for a file that is no view log at all; any lesser damage is a finding.
    """
    view_path = _view_log_path(Path(path))
    contents = read_log(view_path)
    node = contents.header.node_id if contents.header is not None else None
    findings = _findings(contents, node)
    entries = _entries(contents.records, values=values, private=private)
    return {
        "path": str(view_path),
        "header": _header(contents.header),
        "records": _listed(contents, entries),
        "summary": _summary(entries),
        "findings": findings,
        "values_shown": values,
        "private_log_read": private,
        "private": _private(view_path.parent / PRIVATE_LOG_NAME, node, findings) if private else None,
    }


def _view_log_path(path: Path) -> Path:
    """The view log a PATH names: the file itself, or view.log in a node folder."""
    if not path.exists():
        raise ConfigError(f"{path} does not exist (expected a node folder RUNDIR/node-<id> or its {VIEW_LOG_NAME})")
    if path.is_dir():
        path = path / VIEW_LOG_NAME
        if not path.is_file():
            raise ConfigError(f"{path} does not exist: not a node folder written by a netdp node")
    elif path.name == PRIVATE_LOG_NAME:
        raise ConfigError(f"{path} is a private log: give the node folder or its {VIEW_LOG_NAME}, "
                          "and --private to see the private log")
    return path


def _findings(contents: LogContents, node: int | None) -> list[dict[str, object]]:
    """The reader's findings, plus a missing header when damage hid it (the reader names only the first problem)."""
    findings = reader_findings(contents, node, "shown")
    if contents.header is None and not any(finding.kind == "missing_header" for finding in findings):
        findings.append(Finding("error", "missing_header", node, f"{contents.path}: no readable run header"))
    return [finding.to_json() for finding in findings]


def _header(header: viewlog_pb2.RunHeader | None) -> Document | None:
    """What the run header holds (a sampler's seed is never logged), public parameters parsed."""
    if header is None:
        return None
    try:
        parameters: object = json.loads(header.public_parameters_json)
    except json.JSONDecodeError:
        parameters = header.public_parameters_json
    return {**{name: getattr(header, name) for name in HEADER_FIELDS}, "public_parameters": parameters}


def _entries(records: Sequence[viewlog_pb2.Record], *, values: bool, private: bool) -> list[Document]:
    """One entry per record, in log order, timed from the first record."""
    start = records[0].logged_unix if records else 0.0
    return [_entry(index, record, start, values=values, private=private) for index, record in enumerate(records)]


def _listed(contents: LogContents, entries: list[Document]) -> list[Document]:
    """The entries listed one per line: all but the run header, which is shown on its own."""
    return entries[1:] if contents.header is not None else entries


def _entry(index: int, record: viewlog_pb2.Record, start: float, *, values: bool, private: bool) -> Document:
    """A record as stable fields: peer, message id, payload size (values on request), its other fields."""
    kind = record.WhichOneof("kind")
    entry = getattr(record, kind)
    shown = private if kind in PRIVATE_RECORDS else values
    fields: Document = {}
    peer: int | None = None
    payload: Document | None = None
    for field in entry.DESCRIPTOR.fields:
        name = field.name
        if name == "peer":
            peer = entry.peer if not field.has_presence or entry.HasField("peer") else None
        elif name == "claimed_sender":
            peer = entry.claimed_sender if entry.claimed_sender >= 0 else None
        elif kind in MESSAGE_RECORDS and (name in ID_FIELDS or name == "kind"):
            continue
        elif field.message_type is viewlog_pb2.Tensor.DESCRIPTOR:
            payload = _payload(getattr(entry, name), values=shown) if entry.HasField(name) else None
        elif field.message_type is viewlog_pb2.MessageRef.DESCRIPTOR:  # a step's inputs
            fields[name] = [_reference(item) for item in getattr(entry, name)]
        else:
            value = getattr(entry, name)
            fields[name] = value.hex() if isinstance(value, bytes) else value  # a digest
    return {
        "index": index,
        "offset_s": record.logged_unix - start,
        "kind": kind,
        "peer": peer,
        "message": _message(entry) if kind in MESSAGE_RECORDS else None,
        "payload": payload,
        "fields": fields,
    }


def _message(source: Any) -> Document:
    """A message's kind and its full id (round, sequence, exchange id, token id, hop)."""
    return {"kind": kind_of(source), **MessageId.of(source)._asdict()}


def _reference(ref: viewlog_pb2.MessageRef) -> Document:
    """A message named in a step's inputs."""
    return {"peer": ref.peer if ref.HasField("peer") else None, "message": _message(ref)}


def _payload(tensor: viewlog_pb2.Tensor, *, values: bool) -> Document:
    """A payload's size; its float64 values, flattened, only when asked for (a structure-only copy has none)."""
    data = tensor.data
    size = payload_bytes(tensor)
    floats = size // WIRE_DTYPE.itemsize
    shown = None
    if values and not tensor.stripped_bytes:
        shown = np.frombuffer(data[: floats * WIRE_DTYPE.itemsize], dtype=WIRE_DTYPE).tolist()
    return {"shape": list(tensor.shape), "bytes": size, "floats": floats, "values": shown}


def _summary(entries: Sequence[Document]) -> Document:
    """Counts per record kind and per peer, drop-outs per neighbour, refusals, budget spent, final output."""
    by_peer: dict[int | None, Counter[str]] = defaultdict(Counter)
    dropped: dict[int, list[int]] = defaultdict(list)
    of_kind: dict[str, list[Document]] = defaultdict(list)
    for entry in entries:
        kind = entry["kind"]
        of_kind[kind].append(entry)
        if kind in PEER_RECORDS:
            by_peer[entry["peer"]][kind] += 1
        if kind == "drop_out":
            dropped[entry["peer"]].append(entry["fields"]["round"])
    budget = [entry["fields"] for entry in of_kind["budget"]]
    finals = of_kind["final_output"]
    return {
        "records_by_kind": {kind: len(listed) for kind, listed in of_kind.items() if listed},
        "peers": [{"peer": peer, "records_by_kind": dict(counts)}
                  for peer, counts in sorted(by_peer.items(), key=lambda item: (item[0] is None, item[0] or 0))],
        "drop_outs": [{"peer": peer, "count": len(rounds), "rounds": rounds}
                      for peer, rounds in sorted(dropped.items())],
        "refusals_by_status": dict(Counter(entry["fields"]["status_code"] for entry in of_kind["rejected"])),
        "budget": {"records": len(budget), "epsilon_sum": sum(b["epsilon"] for b in budget),
                   "delta_sum": sum(b["delta"] for b in budget)},
        "final_output": None if not finals else {
            "rounds_completed": finals[0]["fields"]["rounds_completed"],
            "payload": {**finals[0]["payload"], "values": None} if finals[0]["payload"] else None,
        },
    }


def _private(path: Path, node: int | None, findings: list[dict[str, object]]) -> Document | None:
    """The private log's header, its inputs and noise draws with values, and draws counted per purpose."""
    if not path.is_file():
        findings.append(Finding("warning", "missing_log", node, f"{path} does not exist").to_json())
        return None
    try:
        contents = read_log(path)
    except LogFormatError as exc:
        findings.append(Finding("error", "unreadable_log", node, str(exc)).to_json())
        return None
    findings.extend(_findings(contents, node))
    draws = Counter((record.noise.purpose, record.noise.mechanism or "gaussian")
                    for record in contents.records if record.WhichOneof("kind") == "noise")
    return {
        "path": str(path),
        "header": _header(contents.header),
        "records": _listed(contents, _entries(contents.records, values=False, private=True)),
        "noise_by_purpose": [{"purpose": purpose, "mechanism": mechanism, "draws": count}
                             for (purpose, mechanism), count in sorted(draws.items())],
    }


# --- the listing as text ------------------------------------------------------------------------


def print_listing(document: Document, stream: TextIO) -> None:
    """Header, records, summary, findings and the private section: rich tables on a terminal, plain lines otherwise."""
    console = Console(file=stream, highlight=False)
    emit = _table_printer(console, stream)
    header = document["header"]
    header_rows = [("path", document["path"])]
    if header is not None:
        header_rows += _header_rows(header)
    emit("view log", ("field", "value"), header_rows)
    values = document["values_shown"]
    emit(f"records ({len(document['records'])})", _record_columns(values), _record_rows(document["records"], values))
    _print_summary(document["summary"], emit)
    emit(f"findings ({len(document['findings'])})", ("severity", "kind", "detail"),
         [(f["severity"], f["kind"], f["detail"]) for f in document["findings"]])
    private = document["private"]
    if private is not None:
        emit("private log", ("field", "value"), [("path", private["path"])] + (
            _header_rows(private["header"]) if private["header"] is not None else []))
        emit("noise draws per purpose", ("purpose", "mechanism", "draws"),
             [(d["purpose"], d["mechanism"], str(d["draws"])) for d in private["noise_by_purpose"]])
        emit(f"private records ({len(private['records'])})", _record_columns(True),
             _record_rows(private["records"], True))
    elif not document["private_log_read"]:
        stream.write("private log not opened (--private shows it)\n")


def _table_printer(console: Console, stream: TextIO) -> Emit:
    """A function printing one titled table: a rich table on a terminal, aligned plain lines elsewhere."""

    def emit(title: str, columns: Row, rows: Sequence[Row]) -> None:
        rows = [tuple(cell if column in UNCUT_COLUMNS else bounded_cell(cell) for cell, column in zip(row, columns))
                for row in rows]
        if not rows:
            stream.write(f"{title}: none\n\n")
        elif console.is_terminal:
            table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
            for column in columns:  # free text takes the room left; every cell wraps, none is cut
                table.add_column(column, overflow="fold", ratio=1 if column in FREE_TEXT_COLUMNS else None)
            for row in rows:
                table.add_row(*(Text(cell) for cell in row))
            console.print(table)
        else:
            _plain_table(stream, title, columns, rows)

    return emit


def bounded_cell(text: str) -> str:
    """`text`, or its first MAX_CELL_CHARS characters and how many more there were."""
    if len(text) <= MAX_CELL_CHARS:
        return text
    return f"{text[:MAX_CELL_CHARS]}... ({len(text) - MAX_CELL_CHARS} more characters)"


def _plain_table(stream: TextIO, title: str, columns: Row, rows: Sequence[Row]) -> None:
    """A table as aligned lines, for pipes and files."""
    widths = [max([len(column), *(len(row[i]) for row in rows)]) for i, column in enumerate(columns)]
    stream.write(f"{title}\n")
    for row in [columns, *rows]:
        stream.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n")
    stream.write("\n")


def _header_rows(header: Document) -> list[Row]:
    started = datetime.fromtimestamp(header["started_unix"], UTC).isoformat(timespec="seconds")
    parameters = header["public_parameters"]
    return [
        ("run id", header["run_id"]),
        ("protocol", header["protocol"]),
        ("node", str(header["node_id"])),
        ("section", header["section"]),
        ("topology digest", header["topology_digest"]),
        ("sampler", header["sampler_kind"]),
        ("started", started),
        ("payloads", "stripped (a structure-only copy)" if header["payloads_stripped"] else "kept"),
        ("public parameters", parameters if isinstance(parameters, str) else json.dumps(parameters, sort_keys=True)),
    ]


def _record_columns(values: bool) -> Row:
    return ("#", "t (s)", "kind", "peer", "message", "payload", "details") + (("values",) if values else ())


def _record_rows(entries: Iterable[Document], values: bool) -> list[Row]:
    rows = []
    for entry in entries:
        payload = entry["payload"]
        row = [str(entry["index"]), f"{entry['offset_s']:+.3f}", entry["kind"], _peer_text(entry),
               _message_text(entry["message"]) if entry["message"] else "",
               f"{payload['floats']} floats, {payload['bytes']} B" if payload else "",
               _fields_text(entry["fields"])]
        if values:
            shown = payload["values"] if payload else None
            row.append("" if shown is None else "[" + ", ".join(repr(value) for value in shown) + "]")
        rows.append(tuple(row))
    return rows


def _peer_text(entry: Document) -> str:
    """The peer column: empty for a record that names none, ? for a sender-anonymous or unknown one."""
    return _peer_or_anonymous(entry["peer"]) if entry["kind"] in PEER_RECORDS else ""


def _message_text(message: Document) -> str:
    """A message id in short: the fields it sets (a round-0 or field-less id reads r=0)."""
    short = {"round": "r", "sequence": "seq", "exchange_id": "exchange", "token_id": "token", "hop": "hop"}
    parts = [f"{label}={message[name]}" for name, label in short.items() if message[name]]
    return " ".join([message["kind"], *(parts or ["r=0"])])


def _fields_text(fields: Document) -> str:
    parts = []
    for name, value in fields.items():
        if value == "" or value == []:
            continue
        if isinstance(value, list):
            value = ", ".join(f"{_peer_or_anonymous(ref['peer'])}:{_message_text(ref['message'])}" for ref in value)
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"{name}={value}")
    return " ".join(parts)


def _peer_or_anonymous(peer: int | None) -> str:
    return "?" if peer is None else str(peer)


def _print_summary(summary: Document, emit: Emit) -> None:
    kinds = summary["records_by_kind"]
    emit("records per kind", ("kind", "records"), [(kind, str(count)) for kind, count in kinds.items()])
    peer_kinds = sorted({kind for peer in summary["peers"] for kind in peer["records_by_kind"]})
    emit("records per peer", ("peer", *peer_kinds),
         [(_peer_or_anonymous(peer["peer"]), *(str(peer["records_by_kind"].get(kind, 0)) for kind in peer_kinds))
          for peer in summary["peers"]])
    emit("drop-outs per neighbour", ("peer", "drop-outs", "rounds"),
         [(str(d["peer"]), str(d["count"]), number_ranges(d["rounds"])) for d in summary["drop_outs"]])
    rows = [(f"refused {status}", str(count)) for status, count in summary["refusals_by_status"].items()]
    budget = summary["budget"]
    if budget["records"]:
        rows.append(("budget records", f"{budget['records']} (epsilon sum {budget['epsilon_sum']:g}, "
                                       f"delta sum {budget['delta_sum']:g})"))
    final = summary["final_output"]
    rows.append(("final output", "none: the node logged no final output" if final is None else
                 f"{final['payload']['floats']} floats after {final['rounds_completed']} rounds/steps"))
    emit("outcome", ("what", "value"), rows)


def number_ranges(numbers: Sequence[int]) -> str:
    """1, 2, 3, 5 as '1-3, 5'."""
    spans: list[list[int]] = []
    for number in sorted(set(numbers)):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


# --- command line -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `netdp log show` to the CLI."""
    parser = subparsers.add_parser("log", help="inspect a node's logs",
                                   description="Inspect the logs one node wrote during a run.")
    actions = parser.add_subparsers(dest="log_command", required=True, metavar="ACTION")
    show = actions.add_parser(
        "show",
        help="list a node's view log: header, records, drop-outs, refusals, findings",
        description="List the view log of a node folder RUNDIR/node-<id> (or of a view.log file): the run header, "
        "one line per record (time offset, kind, peer, message id, payload size), a summary (records per kind and "
        "per peer, drop-outs per neighbour, refusals, budget, final output) and the reader's findings (a torn tail, "
        "a bad frame, a missing header), the readable prefix still listed. Payload values are not shown unless "
        "--values. The node's private log (its own input and noise) is never opened unless --private.",
        epilog="Exit status: 0 for a readable log, findings or not; 2 (one line on stderr) for a missing path or "
        "a file that is no view log.",
    )
    show.add_argument("path", metavar="PATH", type=Path, help="node folder RUNDIR/node-<id>, or its view.log")
    show.add_argument("--json", action="store_true", help="print one JSON document with the same content")
    show.add_argument("--values", action="store_true",
                      help="also print payload values of the view log (what the node saw: other nodes' noisy values)")
    show.add_argument("--private", action="store_true",
                      help="also open the node's private.log and show its input and noise draws (counts per "
                      "purpose, and values); without it the private log is not opened at all")
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    document = log_listing(args.path, values=args.values, private=args.private)
    if args.json:
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_listing(document, sys.stdout)
    return 0
