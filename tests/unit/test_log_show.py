"""`netdp log show`: a view log listed as text and JSON, damage as findings, the private log only on request."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools import logview
from coordinator_tools.cli import main
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.viewlog import MAGIC, PRIVATE_LOG_NAME, VIEW_LOG_NAME, ViewLogWriter, read_log

RNG = np.random.default_rng(20240611)
RECEIVED = RNG.normal(size=3)  # full-precision values: their repr cannot turn up by chance
INPUT = RNG.normal(size=3)
NOISE = RNG.normal(size=3)


def show(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`netdp log show ARGV` through the real entry point: exit code, stdout, stderr."""
    code = main(["log", "show", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def show_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, _ = show(capsys, *argv, "--json")
    assert code == 0
    return json.loads(out)


def assert_one_line_error(code: int, err: str, expected: str) -> None:
    assert code == 2 and err.count("\n") == 1 and err.startswith("netdp: error: ") and expected in err


def private_values(node_dir: Path) -> list[str]:
    """Every value of the node's private log (inputs and noise draws) as the listing would print it."""
    records = read_log(node_dir / PRIVATE_LOG_NAME).records
    tensors = [r.noise.value if r.WhichOneof("kind") == "noise" else r.private_input.value
               for r in records if r.WhichOneof("kind") in ("noise", "private_input")]
    return [repr(float(value)) for tensor in tensors for value in from_tensor(tensor).ravel()]


def truncated_copy(log: Path, folder: Path, cut: int = 3) -> Path:
    """A copy of `log` in `folder` without its last `cut` bytes: the torn tail of a killed writer."""
    folder.mkdir(parents=True)
    copy = folder / VIEW_LOG_NAME
    copy.write_bytes(log.read_bytes()[:-cut])
    return copy


def write_node(folder: Path) -> Path:
    """A node folder whose view log holds every public record kind, and a private log."""
    header = viewlog_pb2.RunHeader(run_id="show-test", protocol="muffliato", node_id=2, topology_digest="cd" * 32,
                                   public_parameters_json='{"protocol": {"sigma": 1.0}}', sampler_kind="simulation",
                                   section="public", started_unix=1700000000.0)
    with ViewLogWriter(folder / VIEW_LOG_NAME, header) as writer:
        writer.append_many([viewlog_pb2.Record(sent=viewlog_pb2.MessageSent(
            peer=1, round=0, payload=to_tensor(np.zeros(3)), delivered=True, attempts=1))])
        writer.append(viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(
            peer=1, round=0, payload=to_tensor(RECEIVED))))
        for round_index in (1, 2, 4):
            writer.append(viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(
                peer=3, round=round_index, reason="deadline")))
        writer.append(viewlog_pb2.Record(rejected=viewlog_pb2.Rejected(
            claimed_sender=1, round=0, status_code="ALREADY_EXISTS", detail="replay")))
        writer.append(viewlog_pb2.Record(budget=viewlog_pb2.BudgetSpent(step=1, epsilon=0.25, delta=1e-6,
                                                                        mechanism="laplace")))
        writer.append(viewlog_pb2.Record(step_inputs=viewlog_pb2.StepInputs(
            step=1, inputs=[viewlog_pb2.MessageRef(peer=1, kind="model", sequence=4)])))
        writer.append(viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(kind="token", token_id="t7", hop=2)))
        writer.append(viewlog_pb2.Record(final_output=viewlog_pb2.FinalOutput(value=to_tensor(np.ones(3)),
                                                                              rounds_completed=5)))
    header.section = "private"
    with ViewLogWriter(folder / PRIVATE_LOG_NAME, header) as writer:
        writer.append(viewlog_pb2.Record(private_input=viewlog_pb2.PrivateInput(value=to_tensor(INPUT), clipped=True)))
        writer.append(viewlog_pb2.Record(noise=viewlog_pb2.NoiseDraw(purpose="input", value=to_tensor(NOISE),
                                                                     mechanism="gaussian", scale=1.0)))
    return folder


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    return write_node(tmp_path / "node-2")


def test_the_listing_shows_header_records_drop_outs_and_refusals(node_dir: Path, capsys) -> None:
    code, out, err = show(capsys, str(node_dir))
    assert code == 0 and err == ""
    for text in ("run id", "show-test", "simulation", "cd" * 32, "gossip r=0", "3 floats, 24 B",
                 "reason=deadline", "status_code=ALREADY_EXISTS", "epsilon=0.25", "inputs=1:model seq=4",
                 "token token=t7 hop=2", "findings (0): none", "private log not opened"):
        assert text in out, text
    assert "drop-outs per neighbour\npeer  drop-outs  rounds\n3     3          1-2, 4\n" in out
    records = out.split("records (")[1].split("\n\n")[0].splitlines()
    assert [line.split()[2] for line in records[2:]] == [
        "sent", "received", "drop_out", "drop_out", "drop_out", "rejected", "budget", "step_inputs", "received",
        "final_output"]


def test_the_json_document_counts_what_the_reader_reads(node_dir: Path, capsys) -> None:
    document = show_json(capsys, str(node_dir / VIEW_LOG_NAME))
    contents = read_log(node_dir / VIEW_LOG_NAME)
    summary = document["summary"]
    assert summary["records_by_kind"] == dict(Counter(r.WhichOneof("kind") for r in contents.records))
    assert len(document["records"]) == len(contents.records) - 1  # the header is shown on its own
    assert document["header"]["node_id"] == 2
    assert document["header"]["public_parameters"] == {"protocol": {"sigma": 1.0}}
    assert summary["drop_outs"] == [{"peer": 3, "count": 3, "rounds": [1, 2, 4]}]
    assert summary["refusals_by_status"] == {"ALREADY_EXISTS": 1}
    assert summary["budget"] == {"records": 1, "epsilon_sum": 0.25, "delta_sum": 1e-6}
    assert summary["final_output"]["rounds_completed"] == 5 and summary["final_output"]["payload"]["floats"] == 3
    assert {p["peer"]: p["records_by_kind"] for p in summary["peers"]} == {
        1: {"sent": 1, "received": 1, "rejected": 1}, 3: {"drop_out": 3}, None: {"received": 1}}
    received = document["records"][1]
    assert received["message"] == {"kind": "gossip", "round": 0, "sequence": 0, "exchange_id": "", "token_id": "",
                                   "hop": 0}
    assert received["payload"] == {"shape": [3], "bytes": 24, "floats": 3, "values": None}
    assert document["findings"] == [] and document["private"] is None


def test_the_private_log_is_opened_only_with_private(node_dir: Path, capsys, monkeypatch) -> None:
    opened: list[Path] = []
    monkeypatch.setattr(logview, "read_log", lambda path: opened.append(path) or read_log(path))
    secrets = private_values(node_dir)
    for argv in ([], ["--json"], ["--values"]):
        code, out, _ = show(capsys, str(node_dir), *argv)
        assert code == 0 and not any(value in out for value in secrets), argv
    assert opened == [node_dir / VIEW_LOG_NAME] * 3

    code, out, _ = show(capsys, str(node_dir), "--private")
    assert code == 0 and all(value in out for value in secrets)
    assert opened[-1] == node_dir / PRIVATE_LOG_NAME
    private = show_json(capsys, str(node_dir), "--private")["private"]
    assert private["noise_by_purpose"] == [{"purpose": "input", "mechanism": "gaussian", "draws": 1}]
    assert [r["payload"]["values"] for r in private["records"]] == [INPUT.tolist(), NOISE.tolist()]


def test_payload_values_are_shown_only_with_values(node_dir: Path, capsys) -> None:
    seen = [repr(float(value)) for value in RECEIVED]
    _, out, _ = show(capsys, str(node_dir))
    assert not any(value in out for value in seen)
    _, out, _ = show(capsys, str(node_dir), "--values")
    assert all(value in out for value in seen)
    assert show_json(capsys, str(node_dir), "--values")["records"][1]["payload"]["values"] == RECEIVED.tolist()


def test_a_torn_tail_is_a_finding_and_the_prefix_is_listed(node_dir: Path, tmp_path: Path, capsys) -> None:
    copy = truncated_copy(node_dir / VIEW_LOG_NAME, tmp_path / "torn")
    code, out, _ = show(capsys, str(copy))
    assert code == 0 and "torn_tail" in out and "records before it are shown" in out
    document = show_json(capsys, str(copy))
    assert [(f["severity"], f["kind"], f["node"]) for f in document["findings"]] == [("warning", "torn_tail", 2)]
    assert len(document["records"]) == len(read_log(node_dir / VIEW_LOG_NAME).records) - 2
    assert document["summary"]["final_output"] is None


def test_a_bad_frame_and_a_missing_header_are_findings(tmp_path: Path, capsys) -> None:
    damaged = write_node(tmp_path / "node-2") / VIEW_LOG_NAME
    data = bytearray(damaged.read_bytes())
    data[-2] ^= 0xFF  # inside the last record's body: its checksum no longer matches
    damaged.write_bytes(bytes(data))
    findings = show_json(capsys, str(damaged))["findings"]
    assert [(f["severity"], f["kind"]) for f in findings] == [("error", "bad_checksum")]

    headerless = tmp_path / "headerless" / VIEW_LOG_NAME
    headerless.parent.mkdir()
    headerless.write_bytes(MAGIC)
    code, out, _ = show(capsys, str(headerless.parent))
    assert code == 0 and "missing_header" in out
    torn_magic = tmp_path / "torn-magic" / VIEW_LOG_NAME
    torn = truncated_copy(headerless, torn_magic.parent, cut=2)
    document = show_json(capsys, str(torn))
    assert [f["kind"] for f in document["findings"]] == ["torn_tail", "missing_header"] and document["header"] is None


def test_unusable_paths_are_one_line_errors(node_dir: Path, tmp_path: Path, capsys) -> None:
    code, out, err = show(capsys, str(tmp_path / "nowhere"))
    assert_one_line_error(code, err, "does not exist")
    assert out == ""
    assert_one_line_error(*show(capsys, str(tmp_path))[::2], "not a node folder")
    (tmp_path / "junk.log").write_bytes(b"not a log at all")
    assert_one_line_error(*show(capsys, str(tmp_path / "junk.log"))[::2], "bad magic")
    assert_one_line_error(*show(capsys, str(node_dir / PRIVATE_LOG_NAME), "--private")[::2], "is a private log")


def test_a_log_holding_megabyte_strings_lists_in_bounded_lines(tmp_path: Path, capsys) -> None:
    """A log written before field lengths were bounded (or by another writer) may hold a peer's huge strings:
    every listed line stays short, and the whole listing small, however many records there are."""
    contents = read_log(write_node(tmp_path / "node-2") / VIEW_LOG_NAME)
    assert contents.header is not None
    hostile = viewlog_pb2.Record(rejected=viewlog_pb2.Rejected(
        claimed_sender=1, status_code="INVALID_ARGUMENT", detail="d" * 400, kind="k" * (1 << 20),
        token_id="t" * (1 << 19)))
    copy = tmp_path / "hostile" / "node-2"
    copy.mkdir(parents=True)
    with ViewLogWriter(copy / VIEW_LOG_NAME, contents.header) as writer:
        writer.append_many(list(contents.records[1:]) + [hostile] * 5)
    code, out, err = show(capsys, str(copy))
    assert code == 0 and err == ""
    longest = max(len(line) for line in out.splitlines())
    assert longest < 8 * (logview.MAX_CELL_CHARS + 40), longest
    assert len(out) < 40_000, len(out)
    assert "more characters)" in out
