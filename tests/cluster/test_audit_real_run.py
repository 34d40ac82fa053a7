"""Audit of a real multi-process run in which a node was killed: the realized weights count."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator_tools.audit.protocols.muffliato.accountant import account
from coordinator_tools.audit.command import AuditOptions, audit_run
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript, planned_transcript
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
