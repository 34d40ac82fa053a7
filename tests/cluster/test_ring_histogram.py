"""Ring histogram (PAbD Alg. 2) on 8 real node processes over gRPC, then its audit.

With gamma = 0 every answer is the truth and there are no initial elements: every node's
estimate is the exact histogram. With gamma > 0 the raw token is the logged initial elements
plus every logged RR answer, the estimate its debiasing, and no RR draw reaches a view log.
"""

from __future__ import annotations

import numpy as np
import pytest

from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.dataprep.datasets import synthetic_categories, write_node_files
from node.codec import from_tensor
from node.protocols.ring_histogram import INIT_PURPOSE, RR_PURPOSE, RingHistogramParams, debiased
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster
N = 8
CATEGORIES = 3


def run(make_cluster_files, name: str, protocol: RingHistogramParams, options: LaunchOptions = LaunchOptions()):
    files = make_cluster_files(kind="ring", n=N, name=name, protocol=protocol, round_deadline_s=2.0,
                               startup_deadline_s=20.0)
    inputs = synthetic_categories(N, protocol.categories, seed=5)
    write_node_files(inputs, files.data_dir)
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run", options)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    return inputs.ravel().astype(int), result


def test_without_randomization_every_node_outputs_the_exact_histogram(make_cluster_files):
    inputs, result = run(make_cluster_files, "hist-exact", RingHistogramParams(categories=CATEGORIES, gamma=0.0,
                                                                                 cycles=2))
    truth = np.bincount(inputs, minlength=CATEGORIES)
    estimates = result.estimates()
    assert sorted(estimates) == list(range(N))
    for v in range(N):
        np.testing.assert_array_equal(estimates[v], truth)


def test_the_token_is_the_logged_draws_and_they_stay_private(make_cluster_files, tmp_path):
    gamma = 0.4
    protocol = RingHistogramParams(categories=CATEGORIES, gamma=gamma, cycles=1)
    inputs, result = run(make_cluster_files, "hist-noisy", protocol,
                         LaunchOptions(sampler="simulation", simulation_seed=3))
    raw = np.zeros(CATEGORIES)
    for v in range(N):
        private = read_log(node_log_dir(result.rundir, v) / PRIVATE_LOG_NAME)
        draws = private.of_kind("noise")
        answers = [d for d in draws if d.purpose == RR_PURPOSE]
        assert [d.step for d in answers] == [0] and answers[0].mechanism == "randomized_response"
        raw += from_tensor(answers[0].value) + np.eye(CATEGORIES)[inputs[v]]  # e_y - e_x, plus e_x
        init = [d for d in draws if d.purpose == INIT_PURPOSE]
        assert len(init) == (v == 0)
        raw += sum((from_tensor(d.value) for d in init), np.zeros(CATEGORIES))
        view = read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME)
        assert not view.of_kind("noise") and not view.of_kind("private_input")
    assert raw.sum() == N + 4  # ceil(0.4 * 8) = 4 initial elements
    for estimate in result.estimates().values():
        np.testing.assert_allclose(estimate, debiased(raw, gamma=gamma, n=N, cycles=1), rtol=1e-12)
    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True))
    checks = {check["name"]: check for check in report["checks"]}
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    assert checks["exact <= LDP"]["detail"] == f"all {N * (N - 1)} pairs"
    assert report["token_walk"]["exact_not_computed"]["count"] == 0
    assert report["token_walk"]["paper"]["theorem"] == "PAbD Thm 2 by its proof (ring histogram)"
