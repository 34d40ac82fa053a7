"""Auditing randomized Muffliato (Alg. 2): noise once, then asynchronous pairwise averaging.

* `records`: which view-log records the nodes write and what they name;
* `schedule`: the realized exchanges in a causal order, and the walk along them;
* `rebuild`: that schedule from the replayed view logs (half-applied exchanges included);
* `accountant`: the messages' rows, the linear-Gaussian model, every column;
* `trajectories`: conservation of the sum, and payloads recomputed from private logs;
* `simulate`: simulated schedules, and a run planned ex ante over them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.checks import Check, trajectory_check
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.plan import Plan, PlanOptions
from coordinator_tools.audit.protocols.base import ProtocolAuditor, Replay
from coordinator_tools.audit.protocols.muffliato_async.accountant import account, canary_model
from coordinator_tools.audit.protocols.muffliato_async.rebuild import rebuild_schedule
from coordinator_tools.audit.protocols.muffliato_async.records import record_problem
from coordinator_tools.audit.protocols.muffliato_async.schedule import ExchangeSchedule
from coordinator_tools.audit.protocols.muffliato_async.simulate import plan_ex_ante
from coordinator_tools.audit.protocols.muffliato_async.trajectories import (
    CONSERVATION_CHECK,
    check_trajectories,
    conservation_check,
)
from coordinator_tools.audit.records import Finding, NodeLog, single_draw_problem
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError
from node.protocols.muffliato_async import NOISE_PURPOSE, PROTOCOL_NAME
from node.topology import Topology


class MuffliatoAsyncAuditor(ProtocolAuditor[ExchangeSchedule]):
    """Randomized Muffliato: exchange events and the values that crossed, an ExchangeSchedule."""

    name = PROTOCOL_NAME
    joint_views = True  # views are linear in z = x + η: a coalition stacks its members' rows
    averaging = True
    public_records = frozenset({"sent", "received", "rejected", "exchange", "final_output"})
    payload_checks = (CONSERVATION_CHECK,)  # the values that crossed and the values after

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        return record_problem(topology, node, kind, entry)

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        return single_draw_problem(draws, NOISE_PURPOSE)

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> ExchangeSchedule:
        return rebuild_schedule(topology, logs, findings)

    def account(self, run: ExchangeSchedule, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def checks(self, replay: Replay) -> list[Check]:
        checks = [] if replay.payloads_stripped else [conservation_check(replay)]
        if replay.private is not None:
            checks.append(trajectory_check(check_trajectories(replay)))
        return checks

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        return {"exchanges": replay.realized.summary()}

    def canary_model(self, run: ExchangeSchedule, planted: PlantedCanaries) -> CanaryModel:
        return canary_model(run)

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        if options.rounds is not None or options.accelerated is not None:
            raise ConfigError(f"--rounds, --plain and --accelerated plan synchronous gossip; this topology runs "
                              f"{self.name}")
        return plan_ex_ante(topology, options)


AUDITOR = MuffliatoAsyncAuditor()  # registered by node.protocols.muffliato_async
