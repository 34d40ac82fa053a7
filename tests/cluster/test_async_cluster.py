"""Randomized Muffliato on real processes over gRPC: atomic exchanges, conservation, faults.

Every test runs 8 node processes on loopback. Conservation is the sharp check of atomicity:
with σ = 0 an exchange that one side applied and the other did not changes the sum of all
values, so the sum must come out equal to the inputs' sum to 1e-12, whatever was declined,
aborted or lost on the way.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from node.codec import from_tensor
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster
N = 8
CONSERVED_RTOL = 1e-12


def async_params(*, exchanges: int, tick_rate: float, sigma: float = 0.0, dimension: int = 3,
                 exchange_timeout_s: float = 1.0) -> MuffliatoAsyncParams:
    return MuffliatoAsyncParams(sigma=sigma, sensitivity=100.0, alpha=2.0, dimension=dimension, exchanges=exchanges,
                                tick_rate=tick_rate, exchange_timeout_s=exchange_timeout_s)


def exchange_events(rundir, node: int) -> list:
    return read_log(node_log_dir(rundir, node) / VIEW_LOG_NAME).of_kind("exchange")


def relative_gap(total: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(total - expected)) / np.max(np.abs(expected)))


def test_noiseless_exchanges_conserve_the_sum_and_reach_the_mean(make_cluster_files):
    """A high tick rate makes both ends of an edge tick at once: declines happen, nothing is lost."""
    files = make_cluster_files(name="async-exact", protocol=async_params(exchanges=60, tick_rate=200.0))
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run", LaunchOptions(sampler="secure"))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    estimates = np.array([result.estimates()[v] for v in range(N)])
    assert relative_gap(estimates.sum(axis=0), files.values.sum(axis=0)) < CONSERVED_RTOL
    mean = files.values.mean(axis=0)
    spread_before = np.max(np.abs(files.values - mean))
    assert np.max(np.abs(estimates - mean)) < 0.05 * spread_before
    phases = [(e.role, e.phase) for v in range(N) for e in exchange_events(result.rundir, v)]
    committed = phases.count(("initiator", "committed"))
    assert committed == phases.count(("responder", "committed")) > 0
    assert phases.count(("responder", "declined")) > 0  # both ends ticked at once, and one declined
    assert phases.count(("initiator", "proposed")) == N * 60


def test_lost_replies_abort_cleanly_on_both_sides(make_cluster_files):
    """A third of all replies is lost after the responder accepted: those exchanges abort on both sides."""
    files = make_cluster_files(name="async-lost", protocol=async_params(exchanges=30, tick_rate=50.0,
                                                                         exchange_timeout_s=0.5))
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="secure", lost_reply_fraction=0.3))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    estimates = np.array([result.estimates()[v] for v in range(N)])
    assert relative_gap(estimates.sum(axis=0), files.values.sum(axis=0)) < CONSERVED_RTOL
    outcome: dict[str, dict[str, str]] = {}
    for v in range(N):
        for event in exchange_events(result.rundir, v):
            if event.phase in ("committed", "aborted"):
                outcome.setdefault(event.exchange_id, {})[event.role] = event.phase
    aborted = [eid for eid, sides in outcome.items() if sides.get("initiator") == "aborted"]
    assert aborted, "no reply was lost"
    for eid, sides in outcome.items():
        if "responder" in sides:  # the responder accepted: both sides agree on the outcome
            assert sides["responder"] == sides["initiator"], (eid, sides)


def test_a_killed_node_leaves_the_sum_of_what_everyone_holds_unchanged(make_cluster_files):
    """Node 3 is SIGKILLed as its 10th tick starts: survivors finish; survivors + its last value = the inputs."""
    files = make_cluster_files(name="async-killed", protocol=async_params(exchanges=40, tick_rate=50.0,
                                                                           exchange_timeout_s=0.5))
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="secure", kill_at_round={3: 10}))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    assert result.nodes[3].killed_by_request and result.nodes[3].estimate is None
    survivors = result.estimates()
    assert sorted(survivors) == [v for v in range(N) if v != 3]
    committed = [e for e in exchange_events(result.rundir, 3) if e.phase == "committed"]
    if committed:
        last_value = from_tensor(committed[-1].value_after)
    else:
        last_value = from_tensor(read_log(node_log_dir(result.rundir, 3) / PRIVATE_LOG_NAME)
                                 .of_kind("private_input")[0].value)
    total = sum(survivors.values()) + last_value
    assert relative_gap(total, files.values.sum(axis=0)) < CONSERVED_RTOL
    summary = json.loads((result.rundir / "run.json").read_text())
    assert summary["nodes"][3]["killed_by_request"]

