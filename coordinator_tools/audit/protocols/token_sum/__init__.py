"""Auditing the token walks: ring real summation (PAbD Alg. 1, Remark 1), the ring histogram (Alg. 2) and the
complete-graph walk (Alg. 3).

* `records`: which custody and message records the nodes write and what they name;
* `history`: each token's chain of hops from both sides' records, and what breaks it;
* `run`, `rebuild`: the contributions in hop order and every node's view, from the logs;
* `model`, `accountant`: the linear-Gaussian model of the realized path and every column;
* `paper`: Thm 1 and Thm 3 as stated, Thm 2 by its proof, with their conditions checked;
* `histogram`: the ring histogram's columns, its exact loss by enumerating count vectors;
* `trajectories`: every logged token value recomputed from the private logs;
* `plan`: the ring's fixed path, or the walk ex ante over simulated paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.checks import Check, trajectory_check
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.plan import Plan, PlanOptions
from coordinator_tools.audit.protocols.base import ProtocolAuditor, Replay
from coordinator_tools.audit.protocols.token_sum.accountant import account, bound_of
from coordinator_tools.audit.protocols.token_sum.histogram import account_histogram, not_computed
from coordinator_tools.audit.protocols.token_sum.history import CHAIN_FINDINGS
from coordinator_tools.audit.protocols.token_sum.model import canary_model
from coordinator_tools.audit.protocols.token_sum.paper import paper_bound
from coordinator_tools.audit.protocols.token_sum.plan import plan_histogram, plan_ring, plan_walks
from coordinator_tools.audit.protocols.token_sum.rebuild import rebuild_run
from coordinator_tools.audit.protocols.token_sum.records import (
    draws_problem,
    inputs_problem,
    record_problem,
    rules_for,
)
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from coordinator_tools.audit.protocols.token_sum.trajectories import check_trajectories
from coordinator_tools.audit.records import Finding, NodeLog
from coordinator_tools.audit.report import json_number
from netdp.v1 import viewlog_pb2
from node.protocols import ring_histogram, ring_sum, walk_sum
from node.topology import Topology

CHAIN_CHECK = "token history is one unbroken chain"


class TokenSumAuditor(ProtocolAuditor[TokenRun]):
    """A token summation: custody and token records, a TokenRun of contributions and views."""

    public_records = frozenset({"sent", "received", "rejected", "token", "final_output"})
    input_every_step = True  # one input per visit

    def sender_anonymous(self, topology: Topology) -> bool:
        return rules_for(topology).anonymous

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        return record_problem(rules_for(topology), topology, kind, entry)

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        return draws_problem(draws)

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        return inputs_problem(inputs, draws)

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> TokenRun:
        return rebuild_run(topology, logs, findings)

    def account(self, run: TokenRun, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def checks(self, replay: Replay) -> list[Check]:
        checks = [chain_check(replay)]
        if replay.private is not None:
            checks.append(trajectory_check(check_trajectories(replay)))
        return checks

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        run: TokenRun = replay.realized
        return {"token_walk": {"tokens": [history.to_json() for history in run.histories],
                               "paper": bound_of(run, accounting).to_json()}}

    def canary_model(self, run: TokenRun, planted: PlantedCanaries) -> CanaryModel:
        return canary_model(run)


class RingSumAuditor(TokenSumAuditor):
    """Ring real summation: the public ring's fixed path, K cycles, then the result token round once."""

    name = ring_sum.PROTOCOL_NAME

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        return plan_ring(topology, options)


class RingHistogramAuditor(RingSumAuditor):
    """Ring histogram: the ring's token and result, RR answers and the initial elements in the private logs."""

    name = ring_histogram.PROTOCOL_NAME

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        init = [draw for draw in draws if draw.purpose == ring_histogram.INIT_PURPOSE]
        if len(init) > 1 or any(draw.step != 0 or draw.mechanism != "uniform" for draw in init):
            return f"{len(init)} '{ring_histogram.INIT_PURPOSE}' draws, expected at most one uniform one at step 0"
        answers = tuple(draw for draw in draws if draw.purpose != ring_histogram.INIT_PURPOSE)
        return draws_problem(answers, ring_histogram.RR_PURPOSE, "randomized_response")

    def account(self, run: TokenRun, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account_histogram(run, **options)

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        run: TokenRun = replay.realized
        bound = paper_bound(run, sigma=accounting["sigma"], sensitivity=1.0, delta=accounting["delta"],
                            threat_model=accounting.get("threat_model", ThreatModel()))
        params = run.topology.protocol
        return {"token_walk": {"tokens": [history.to_json() for history in run.histories], "paper": bound.to_json(),
                               "rr_epsilon": json_number(ring_histogram.rr_epsilon(params.gamma, params.categories)),
                               "exact_not_computed": not_computed(losses).to_json()}}

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        return plan_histogram(topology, options)

    def canary_model(self, run: TokenRun, planted: PlantedCanaries) -> None:
        return None  # randomized response over categories: no coordinate carries a canary

    def input_bound(self, topology: Topology) -> None:
        return None  # a category, logged one-hot: nothing is clipped


class WalkSumAuditor(TokenSumAuditor):
    """Complete-graph walk summation: a secret uniform path of T contributions, then the result to all."""

    name = walk_sum.PROTOCOL_NAME

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        return plan_walks(topology, options)


def chain_check(replay: Replay) -> Check:
    """Every token's history holds each hop once, handed over by its previous holder, to its last hop."""
    broken = [f for f in replay.consistency if f.kind in CHAIN_FINDINGS and f.severity == "error"]
    if broken:
        kinds = ", ".join(sorted({finding.kind for finding in broken}))
        return Check(CHAIN_CHECK, False, f"{len(broken)} breaks ({kinds}); first: {broken[0].detail}")
    run: TokenRun = replay.realized
    hops = ", ".join(f"{history.token_id} hops 0..{len(history.hops) - 1}" for history in run.histories)
    return Check(CHAIN_CHECK, True, f"{hops}: each held once, handed over by its previous holder")


# Registered by node.protocols.ring_sum, .walk_sum and .ring_histogram.
RING_SUM = RingSumAuditor()
WALK_SUM = WalkSumAuditor()
RING_HISTOGRAM = RingHistogramAuditor()
