"""Audit of a real multi-process run in which a node was killed: the realized weights count."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.protocols.muffliato.accountant import account
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript, planned_transcript
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from node.viewlog import VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster


def transcript_from_logs(rundir, topology) -> Transcript:
    """An independent rebuild: a round a node completed uses every neighbour it did not log as dropped;
    a node's view is what it received, plus late values it refused but that reached it."""
    used, received = [], []
    for v in range(topology.n):
        log = read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME)
        heard = {(r.peer, r.round) for r in log.of_kind("received")}
        dropped = {(d.peer, d.round) for d in log.of_kind("drop_out")}
        rounds = [t for t in range(topology.protocol.rounds)
                  if all((w, t) in heard or (w, t) in dropped for w in topology.neighbours[v])]
        completed = max((t + 1 for t in rounds if rounds[: t + 1] == list(range(t + 1))), default=0)
        used.append(tuple(frozenset(w for w in topology.neighbours[v] if (w, t) not in dropped)
                          for t in range(completed)))
        # A value refused because its round had closed still reached the node: it is in the view.
        late = [(r.claimed_sender, r.round) for r in log.of_kind("rejected") if r.HasField("payload")]
        received.append(tuple((r.peer, r.round) for r in log.of_kind("received")) + tuple(late))
    return Transcript(topology=topology, rounds=topology.protocol.rounds,
                      accelerated=topology.protocol.accelerated, used=tuple(used), received=tuple(received))


def exact_matrix(audit_dir, n: int, key: str = "rdp_upper") -> np.ndarray:
    return pair_matrix(read_pairs(audit_dir), f"exact_{key}", n)


def test_audit_of_a_killed_node_run_uses_the_weights_really_used(make_cluster_files, tmp_path):
    # A ring with few rounds: views are partial, so losses differ by pair and depend on who dropped.
    files = make_cluster_files("ring", 10, sigma=0.5, rounds=4, round_deadline_s=1.0, name="audited-kill")
    topology = files.topology
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=11, kill_at_round={3: 1}))
    assert result.ok and result.nodes[3].killed_by_request

    report = audit_run(result.rundir, tmp_path / "audit",
                       AuditOptions(attack_pairs="none", with_private_logs=True))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    # The page says who died when, and the drop-outs each neighbour logged.
    logs = [read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME) for v in range(topology.n)]
    start = min(log.records[0].logged_unix for log in logs)
    (stopped,) = report["faults"]["stopped"]
    assert stopped["node"] == 3 and stopped["rounds_completed"] == len(transcript_from_logs(result.rundir,
                                                                                            topology).used[3])
    assert stopped["last_record_s"] == pytest.approx(logs[3].records[-1].logged_unix - start)
    logged = {(v, d["peer"]): d["count"] for v in range(topology.n) for d in [
        {"peer": peer, "count": sum(1 for x in logs[v].of_kind("drop_out") if x.peer == peer)}
        for peer in {x.peer for x in logs[v].of_kind("drop_out")}]}
    assert {(d["node"], d["peer"]): d["count"] for d in report["faults"]["drop_outs"]} == logged
    assert logged[(2, 3)] >= 1 and logged[(4, 3)] >= 1  # node 3's neighbours on the ring dropped it
    page = (tmp_path / "audit" / "index.html").read_text()
    assert "<h2>Faults</h2>" in page and f"Node 3 stopped after completing {stopped['rounds_completed']} rounds" in page
    # run.json times each round from the nodes' records: node 3 completed none after it was killed.
    timing = json.loads((result.rundir / "run.json").read_text())["round_timing"]
    assert [row["round"] for row in timing["rounds"]] == list(range(topology.protocol.rounds))
    assert [row["nodes"] for row in timing["rounds"]][2:] == [topology.n - 1] * (topology.protocol.rounds - 2)
    last = [row["last_s"] for row in timing["rounds"]]
    assert last == sorted(last) and sum(row["wall_s"] for row in timing["rounds"]) == pytest.approx(last[-1])
    audited = exact_matrix(tmp_path / "audit", topology.n)

    params = topology.protocol
    kwargs = dict(sigma=params.sigma, sensitivity=params.sensitivity, alpha=params.alpha, delta=report["delta"])
    recomputed = account(transcript_from_logs(result.rundir, topology), **kwargs)
    planned = account(planned_transcript(topology), **kwargs)
    off_diagonal = ~np.eye(topology.n, dtype=bool)
    np.testing.assert_allclose(audited[off_diagonal], recomputed.exact_rdp_upper[off_diagonal], rtol=1e-9)
    np.testing.assert_allclose(exact_matrix(tmp_path / "audit", topology.n, "rdp")[off_diagonal],
                               recomputed.exact_rdp[off_diagonal], rtol=1e-9)
    assert np.abs(audited - planned.exact_rdp_upper)[off_diagonal].max() > 1e-3
    # Node 3 stopped early: nobody hears its later values, so its row of losses can only shrink.
    assert np.all(audited[3, off_diagonal[3]] <= planned.exact_rdp_upper[3, off_diagonal[3]] + 1e-12)
