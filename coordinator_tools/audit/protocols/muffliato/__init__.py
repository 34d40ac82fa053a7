"""Auditing synchronous Muffliato (Alg. 1): T rounds of plain or Chebyshev gossip from x + η.

* `transcript`: who mixed whose round value (the realized schedule), and the planned one;
* `rebuild`: that transcript from the replayed view logs;
* `coefficients`, `accountant`: the messages' rows, the linear-Gaussian model, every column;
* `paper`: Theorem 1 streamed round by round; `trajectories`: payloads recomputed;
* `plan`: a run accounted before it happens, T_stop and calibration.
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
from coordinator_tools.audit.protocols.muffliato.accountant import account, canary_model
from coordinator_tools.audit.protocols.muffliato.plan import plan
from coordinator_tools.audit.protocols.muffliato.rebuild import rebuild_transcript, round_record_problem
from coordinator_tools.audit.protocols.muffliato.trajectories import check_trajectories
from coordinator_tools.audit.protocols.muffliato.transcript import (
    Transcript,
    planned_transcript,
)
from coordinator_tools.audit.records import Finding, NodeLog, single_draw_problem
from coordinator_tools.audit.report import json_number, observer_means
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError
from node.protocols.muffliato import NOISE_PURPOSE, PROTOCOL_NAME
from node.topology import Topology


class MuffliatoAuditor(ProtocolAuditor[Transcript]):
    """Synchronous Muffliato: round values, drop-outs, a Transcript of used sets."""

    name = PROTOCOL_NAME
    joint_views = True  # views are linear in z = x + η: a coalition stacks its members' rows
    averaging = True
    public_records = frozenset({"sent", "received", "drop_out", "rejected", "final_output"})

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        return round_record_problem(self.name, topology.protocol.rounds, kind, entry)

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        return single_draw_problem(draws, NOISE_PURPOSE)

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> Transcript:
        return rebuild_transcript(topology, logs, findings)

    def account(self, run: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def checks(self, replay: Replay) -> list[Check]:
        return [] if replay.private is None else [trajectory_check(check_trajectories(replay))]

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        return {"planned_vs_run": _planned_vs_run(replay.realized, losses, accounting)}

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel:
        return canary_model(run)

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        if options.schedules is not None or options.seed is not None:
            raise ConfigError(f"--schedules and --seed plan randomized schedules; this topology runs {self.name}")
        params = topology.protocol
        return plan(
            topology,
            rounds=params.rounds if options.rounds is None else options.rounds,
            accelerated=params.accelerated if options.accelerated is None else options.accelerated,
            sigma=params.sigma if options.sigma is None else options.sigma,
            sensitivity=params.sensitivity if options.sensitivity is None else options.sensitivity,
            alpha=params.alpha if options.alpha is None else options.alpha,
            delta=options.delta,
            conversion=options.conversion,
            threat_model=options.threat_model,
            target=options.target,
        )


def _planned_vs_run(transcript: Transcript, losses: PairwiseLosses, accounting: Mapping[str, Any]) -> dict[str, object]:
    """How the realized schedule's losses differ from the plan's (drop-outs, early stops, late values)."""
    planned = planned_transcript(transcript.topology, rounds=transcript.rounds, accelerated=transcript.accelerated)
    same = planned.used == transcript.used and all(
        set(plan) == set(run) for plan, run in zip(planned.received, transcript.received)
    )
    if same:
        return {"same_schedule": True}
    planned_losses = account(planned, **accounting)
    return {
        "same_schedule": False,
        "mean_exact_rdp_per_observer": {
            "planned": [json_number(x) for x in observer_means(planned_losses.exact_rdp_upper)],
            "run": [json_number(x) for x in observer_means(losses.exact_rdp_upper)],
        },
    }


AUDITOR = MuffliatoAuditor()  # registered by node.protocols.muffliato
