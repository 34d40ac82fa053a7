"""Planning: noise calibration by bisection, T_stop, and the `netdp plan` command's file."""

from __future__ import annotations

import argparse
import json

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit import plan_command
from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import PlanOptions, Target, calibrate_sigma, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.muffliato.accountant import transcript_geometry
from coordinator_tools.audit.protocols.muffliato.plan import plan
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_async.accountant import (
    account as account_schedule,
)
from coordinator_tools.audit.protocols.muffliato_async.simulate import (
    simulated_schedule,
)
from coordinator_tools.audit.report import SCHEMA_VERSION
from coordinator_tools.theory import muffliato_t_stop, worst_case_spread
from coordinator_tools.topology import generators
from node.errors import ConfigError
from node.topology import save_topology
from tests.accounting.plan_cli import run_plan
from tests.accounting.reference import topology_from_graph
from tests.accounting.simulated_async_run import async_topology

DELTA = 1e-5


def async_auditor():
    return auditor_named("muffliato-async")


def geometry_of(graph, rounds):
    transcript = planned_transcript(topology_from_graph(graph, rounds=rounds, accelerated=True))
    return transcript_geometry(transcript).upper


def loss(geometry, sigma, rule):
    return summarize(gaussian_epsilon(np.sqrt(geometry) / sigma, DELTA), rule)


@pytest.mark.parametrize("rule", ["mean", "worst"])
def test_calibrated_sigma_is_the_smallest_that_meets_the_target(rule):
    geometry = geometry_of(generators.erdos_renyi(24, seed=3), 3)
    target = Target(1.5, rule)
    sigma = calibrate_sigma(geometry, sensitivity=1.0, delta=DELTA, target=target)
    assert loss(geometry, sigma, rule) <= 1.5 < loss(geometry, sigma * (1 - 1e-5), rule)


def test_worst_pair_target_on_a_reconstructing_graph_is_the_local_dp_noise():
    """Every neighbour reconstructs: the worst pair is local DP, so σ solves ε_Gauss(Δ/σ) = target."""
    geometry = geometry_of(generators.ring(10), 2)
    sigma = calibrate_sigma(geometry, sensitivity=2.0, delta=DELTA, target=Target(1.0, "worst"))
    assert gaussian_epsilon(2.0 / sigma, DELTA) == pytest.approx(1.0, rel=1e-5)


def test_an_unreachable_view_needs_no_noise():
    assert calibrate_sigma(np.zeros((3, 3)), sensitivity=1.0, delta=DELTA, target=Target(0.1, "worst")) == 0.0


def test_plan_calibrates_the_exact_loss_and_the_baselines_to_one_target():
    topology = topology_from_graph(generators.hypercube(16), rounds=4, accelerated=True)
    result = plan(topology, rounds=4, accelerated=True, sigma=1.0, sensitivity=1.0, alpha=2.0, delta=DELTA,
                  target=Target(1.0, "mean"))
    sigmas = result.details["calibration"]["sigma"]
    assert result.losses.sigma == sigmas["exact"]
    assert summarize(result.losses.exact_eps_upper, "mean") <= 1.0
    assert sigmas["central"] < sigmas["exact"] <= sigmas["ldp"]
    spread = worst_case_spread(1.0)
    assert result.details["t_stop"] == muffliato_t_stop(16, topology.spectral_gap, sigmas["exact"], spread, True)


def test_plan_command_writes_the_report_schema_with_topology_defaults(tmp_path, capsys):
    topology = topology_from_graph(generators.ring(8), rounds=3, accelerated=False, sigma=0.8, alpha=4.0)
    save_topology(topology, tmp_path / "topology.json")
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    out = tmp_path / "plan.json"
    args = parser.parse_args(["plan", str(tmp_path / "topology.json"), "--out", str(out), "--own-noise-unknown"])
    assert args.handler(args) == 0
    document = json.loads(out.read_text())
    assert document["schema"] == SCHEMA_VERSION
    assert (document["sigma"], document["alpha"], document["delta"]) == (0.8, 4.0, DELTA)
    t_stop = muffliato_t_stop(8, topology.spectral_gap, 0.8, worst_case_spread(1.0), False)
    assert document["plan"] == {"rounds": 3, "accelerated": False, "t_stop": t_stop}
    assert document["threat_model"]["observer_knows_own_noise"] is False
    assert document["checks"] and all(check["ok"] for check in document["checks"])
    assert document["pairs_file"]["file"] == "plan-pairs.parquet" and document["pairs_file"]["csv"] == "plan-pairs.csv"
    assert len(read_pairs(out)["source"]) == 8 * 7 and (tmp_path / "plan-pairs.csv").exists()
    assert "T_stop" in capsys.readouterr().out


def test_plan_command_rejects_a_bad_target(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "t.json", "--out", "p.json", "--target-worst-eps", "0"])
    assert "expected a number > 0" in capsys.readouterr().err


def test_plan_exports_the_pairs_as_csv_when_asked_beyond_the_small_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("coordinator_tools.audit.pairs_file.CSV_AUTO_MAX_N", 4)
    topology = topology_from_graph(generators.ring(8), rounds=3, accelerated=False, sigma=0.8)
    code, document = run_plan(tmp_path, topology)
    assert code == 0 and document["pairs_file"]["csv"] is None and not (tmp_path / "plan-pairs.csv").exists()
    code, document = run_plan(tmp_path, topology, "--csv")
    assert code == 0 and document["pairs_file"]["csv"] == "plan-pairs.csv"
    assert len((tmp_path / "plan-pairs.csv").read_text().splitlines()) == 1 + 8 * 7


def test_plan_without_noise_says_so_once_and_still_writes(tmp_path, capsys):
    code, document = run_plan(tmp_path, topology_from_graph(generators.ring(6), rounds=2, accelerated=False,
                                                             sigma=0.0))
    printed = capsys.readouterr().out
    assert code == 0 and printed.count("σ = 0: no privacy") == 1 and "inf" not in printed
    assert document["sigma"] == 0 and document["baselines"]["ldp"]["rdp"] == "inf"


def test_ex_ante_plan_of_one_schedule_is_that_schedules_audit():
    topology = async_topology(ticks=3)
    result = async_auditor().plan(topology, PlanOptions(schedules=1, seed=4, delta=DELTA))
    (schedule,) = result.run.schedules
    assert schedule == simulated_schedule(topology, np.random.default_rng(4))
    direct = account_schedule(schedule, sigma=topology.protocol.sigma, sensitivity=1.0, alpha=2.0, delta=DELTA)
    off = ~np.eye(topology.n, dtype=bool)
    for column in ("paper_rdp", "exact_rdp", "exact_rdp_upper"):
        assert np.allclose(getattr(result.losses, column)[off], getattr(direct, column)[off], rtol=1e-12, atol=0)
    for column in ("paper_eps", "exact_eps", "exact_eps_upper"):
        assert np.allclose(getattr(result.losses, column)[off], getattr(direct, column)[off], rtol=1e-9, atol=1e-12)
    assert np.array_equal(result.losses.reconstructable, direct.reconstructable)


def test_simulated_schedules_follow_the_clocks_and_the_activation():
    topology = async_topology(nx.star_graph(4), ticks=200)
    schedule = simulated_schedule(topology, np.random.default_rng(0))
    assert schedule.ticks == (200,) * 5 and len(schedule.exchanges) == 1000
    assert all(e.status == "committed" for e in schedule.exchanges)
    # Metropolis on a star: the hub picks each leaf with probability 1/4, every leaf picks the hub
    hub = [e.responder for e in schedule.exchanges if e.initiator == 0]
    assert np.allclose(np.bincount(hub, minlength=5)[1:] / 200, 0.25, atol=0.1)
    assert all(e.responder == 0 for e in schedule.exchanges if e.initiator != 0)


def test_ex_ante_plan_command_reports_its_schedules_and_calibrates(tmp_path, capsys):
    code, document = run_plan(tmp_path, async_topology(ticks=3), "--schedules", "6", "--seed", "2",
                              "--target-mean-eps", "2.0")
    assert code == 0 and document["protocol"] == document["run"]["protocol"] == "muffliato-async"
    assert document["plan"]["schedules"] == document["run"]["schedules"] == 6 and document["plan"]["seed"] == 2
    calibration = document["plan"]["calibration"]["sigma"]
    assert document["sigma"] == calibration["exact"] and calibration["central"] < calibration["exact"]
    eps = pair_matrix(read_pairs(tmp_path / "plan.json"), "exact_eps_upper", 5)
    assert summarize(eps, "mean") <= 2.0
    assert "6 simulated schedules" in capsys.readouterr().out


def test_plan_options_of_the_other_protocol_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="--rounds"):
        run_plan(tmp_path, async_topology(), "--rounds", "3")
    with pytest.raises(ConfigError, match="--schedules"):
        run_plan(tmp_path, topology_from_graph(generators.ring(4), rounds=2, accelerated=False), "--schedules", "3")
