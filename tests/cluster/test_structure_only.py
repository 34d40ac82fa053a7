"""An audit that does not leak: view logs are private files, and their structure-only copies audit to the same numbers.

Virtual runs of synchronous Muffliato, ring-sum and randomized Muffliato are audited from their
full view logs and from `netdp collect --structure-only` copies: every pair's exact, paper and
LDP values agree to 1e-12, the copies hold no byte of any logged value, and the report names
what it could not compute. The networked run (marked `cluster`, run it through the cluster
lock) kills a node, so its copy must also carry the drop-outs and the stopped node.
"""

from __future__ import annotations

import shutil
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cli import main
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.cluster.virtual import run_virtual
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.errors import ConfigError
from node.protocols.muffliato import MuffliatoParams
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.protocols.ring_sum import RingSumParams
from node.viewlog import MAGIC, PRIVATE_LOG_NAME, VIEW_LOG_NAME, encode_record, read_log

N = 6
COLUMNS = ("paper_rdp", "paper_eps", "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper", "ldp_rdp",
           "ldp_eps")
PROTOCOLS = [
    pytest.param(MuffliatoParams(sigma=0.5, sensitivity=1.0, alpha=2.0, rounds=2, dimension=2), id="muffliato"),
    pytest.param(RingSumParams(sigma=0.5, sensitivity=1.0, alpha=2.0, dimension=2, cycles=2), id="ring-sum"),
    pytest.param(MuffliatoAsyncParams(sigma=0.5, sensitivity=1.0, alpha=2.0, dimension=2, exchanges=4, tick_rate=50.0,
                                      exchange_timeout_s=1.0), id="muffliato-async"),
]


@dataclass(frozen=True)
class Collected:
    """A finished run folder and the structure-only copy `netdp collect --structure-only` made of it."""

    rundir: Path
    structure: Path


@pytest.fixture(scope="module", params=PROTOCOLS)
def collected(request, make_module_cluster_files) -> Collected:
    protocol = request.param
    files = make_module_cluster_files("ring", N, protocol=protocol, name=protocol.name)
    rundir = files.root / "run"
    result = run_virtual(files.topology_path, files.data_dir, rundir,
                         LaunchOptions(sampler="simulation", simulation_seed=3))
    assert result.ok, [node.stderr_tail for node in result.failures]
    assert main(["collect", "--structure-only", str(rundir), "--out", str(files.root / "structure")]) == 0
    return Collected(rundir, files.root / "structure")


def modes(rundir: Path, name: str) -> set[int]:
    return {stat.S_IMODE((node_log_dir(rundir, v) / name).stat().st_mode) for v in range(N)}


def logged_values(rundir: Path) -> set[bytes]:
    """Every nonzero float of every payload the full view logs hold, packed as the logs pack them."""
    values: set[bytes] = set()
    for v in range(N):
        for record in read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME).records:
            entry = getattr(record, record.WhichOneof("kind"))
            for field, value in entry.ListFields():
                if field.message_type is viewlog_pb2.Tensor.DESCRIPTOR:
                    values.update(struct.pack("<d", x) for x in from_tensor(value).ravel() if x != 0.0)
    return values


def assert_same_columns(full: Path, structure: Path) -> None:
    """Every pair's exact, paper and LDP values of the two audits, to 1e-12 (no value in the same pairs)."""
    left, right = read_pairs(full), read_pairs(structure)
    assert np.array_equal(left["source"], right["source"]) and np.array_equal(left["observer"], right["observer"])
    for column in COLUMNS:
        assert np.array_equal(np.isnan(left[column]), np.isnan(right[column])), column
        known = ~np.isnan(left[column])
        assert np.all(np.abs(left[column][known] - right[column][known]) <= 1e-12), column
    assert np.count_nonzero(~np.isnan(left["exact_rdp_upper"])) == N * (N - 1)


def test_view_logs_are_private_and_their_copies_hold_no_logged_value(collected):
    assert modes(collected.rundir, VIEW_LOG_NAME) == modes(collected.rundir, PRIVATE_LOG_NAME) == {0o600}
    assert modes(collected.structure, VIEW_LOG_NAME) == {0o600}
    values = logged_values(collected.rundir)
    assert len(values) >= 2 * N  # every node sent a value
    for v in range(N):
        copied = node_log_dir(collected.structure, v)
        assert [path.name for path in copied.iterdir()] == [VIEW_LOG_NAME]  # no estimate, no private log
        data = (copied / VIEW_LOG_NAME).read_bytes()
        assert not any(value in data for value in values)
        full, stripped = (read_log(node_log_dir(root, v) / VIEW_LOG_NAME) for root in (collected.rundir,
                                                                                        collected.structure))
        assert stripped.damage is None and stripped.header.payloads_stripped
        assert [r.WhichOneof("kind") for r in stripped.records] == [r.WhichOneof("kind") for r in full.records]


def test_structure_only_logs_give_the_full_logs_exact_and_paper_columns(collected, tmp_path):
    full = audit_run(collected.rundir, tmp_path / "full", AuditOptions(attack_pairs="none"))
    stripped = audit_run(collected.structure, tmp_path / "structure", AuditOptions(attack_pairs="none"))
    assert_same_columns(tmp_path / "full", tmp_path / "structure")
    assert full["payloads"] == {"stripped": False, "reason": None, "not_computed": []}
    block = stripped["payloads"]
    assert block["stripped"] and "structure-only" in block["reason"]
    names = [item["name"] for item in block["not_computed"]]
    payload_checks = ["committed exchanges conserve the sum of values"] if full["protocol"] == "muffliato-async" else []
    assert names == ["empirical", "transcript reproduces the logged payloads", *payload_checks, "utility"]
    # Every check of the full audit that reads no payload holds or fails alike on the copy.
    assert {c["name"]: c["ok"] for c in stripped["checks"]} == {
        c["name"]: c["ok"] for c in full["checks"] if c["name"] not in payload_checks}
    notes = [f for f in stripped["replay"]["consistency"] if f["kind"] == "payloads_not_compared"]
    assert len(notes) == 1 and "payload bytes are not compared" in notes[0]["detail"]
    if "utility" in full:
        assert stripped["utility"]["mse"] is None and "stripped" in stripped["utility"]["reason"]


@pytest.mark.parametrize(("options", "flag"), [
    ({"with_private_logs": True}, "--with-private-logs"),
    ({"data": Path("data")}, "--data"),
])
def test_options_that_need_payloads_are_refused_in_one_line(collected, tmp_path, options, flag):
    with pytest.raises(ConfigError, match=f"^{flag}: ") as refused:
        audit_run(collected.structure, tmp_path / "audit", AuditOptions(**options))
    assert "structure-only" in str(refused.value) and "\n" not in str(refused.value)


def test_a_folder_mixing_both_kinds_is_refused_and_a_kept_payload_is_left_out(collected, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(collected.structure, mixed)
    (mixed / "node-2" / VIEW_LOG_NAME).unlink()
    shutil.copyfile(node_log_dir(collected.rundir, 2) / VIEW_LOG_NAME, mixed / "node-2" / VIEW_LOG_NAME)
    mixing = r"mixes structure-only view logs \(nodes 0-1,3-5\) with full ones \(node 2\)"
    with pytest.raises(ConfigError, match=mixing):
        audit_run(mixed, tmp_path / "audit")
    # A copy whose header says stripped but one of whose records still holds its payload.
    full = read_log(node_log_dir(collected.rundir, 2) / VIEW_LOG_NAME)
    header = viewlog_pb2.Record()
    header.CopyFrom(full.records[0])
    header.header.payloads_stripped = True
    kept = next(r for r in full.records if r.WhichOneof("kind") == "sent")
    (mixed / "node-2" / VIEW_LOG_NAME).write_bytes(MAGIC + encode_record(header) + encode_record(kept))
    (finding,) = [f for f in replay_run(mixed).node_problems if f.kind == "stripping_mismatch"]
    assert finding.node == 2 and finding.severity == "error" and "holds payload bytes" in finding.detail


@pytest.mark.cluster
def test_a_networked_run_with_a_killed_node_audits_the_same_from_its_structure(make_cluster_files, tmp_path):
    files = make_cluster_files("ring", N, sigma=0.5, rounds=3, dimension=2, round_deadline_s=1.0, name="killed")
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=5, kill_at_round={2: 1}))
    assert result.ok and result.nodes[2].killed_by_request
    assert modes(result.rundir, VIEW_LOG_NAME) == modes(result.rundir, PRIVATE_LOG_NAME) == {0o600}
    assert main(["collect", "--structure-only", str(result.rundir), "--out", str(tmp_path / "structure")]) == 0
    full = audit_run(result.rundir, tmp_path / "full-audit", AuditOptions(attack_pairs="none"))
    stripped = audit_run(tmp_path / "structure", tmp_path / "structure-audit", AuditOptions(attack_pairs="none"))
    assert_same_columns(tmp_path / "full-audit", tmp_path / "structure-audit")
    assert [s["node"] for s in full["faults"]["stopped"]] == [2] and full["faults"]["drop_outs"]
    assert stripped["faults"] == full["faults"]
    assert [node["log"] for node in stripped["replay"]["nodes"]] == [node["log"] for node in full["replay"]["nodes"]]
    data = b"".join((node_log_dir(tmp_path / "structure", v) / VIEW_LOG_NAME).read_bytes() for v in range(N))
    assert not any(value in data for value in logged_values(result.rundir))
