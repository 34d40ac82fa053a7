"""Auditing Muffliato-GD/SGD (Muffliato Alg. 3): a noisy gradient step, then K gossip rounds, T times.

The logs are synchronous gossip logs (round t·K + k is gossip round k of step t, on that
step's graph), so the replay and the rebuild are synchronous Muffliato's with one graph per
step; what differs is the model of a message (every step's gradient and noise are their own
columns) and the closed forms:

* `unrolled`: the realized schedule, unrolled in time into one coefficient row per message on
  every (node, step) gradient and noise draw;
* `sensitivity`: the matrix-factorization sensitivity of every pair with every other gradient held fixed
  (the "linearized" column; the "exact" column is the proven bound of `audit.reachable`);
* `paper`: Thm 6 (Eq. 9) on the realized schedule, the corrected closed form, and which pairs
  Eq. 9 undercounts;
* `accountant`: the rebuilt Transcript turned into that schedule, and every column per pair;
* `utility`: the test metric over steps against the central and local-DP baselines;
* `schedules`: the spread of pairwise losses on the run's schedule against the other one, planned
  (fixed graph against a graph drawn per step, Muffliato Fig. 1b);
* `trajectories`: with the private logs, every model sent recomputed from the nodes' gradients and draws;
* `clip`: with the private logs, every logged step gradient within the clip bound Δ is calibrated to.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.checks import Check, trajectory_check
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.plan import Plan, PlanOptions, baseline_sigmas, calibrate_sigma
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.muffliato import MuffliatoAuditor
from coordinator_tools.audit.protocols.muffliato.rebuild import rebuild_transcript
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript, planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.accountant import account, canary_model, planned_geometry
from coordinator_tools.audit.protocols.muffliato_gd.clip import clip_check
from coordinator_tools.audit.protocols.muffliato_gd.schedules import schedule_comparison
from coordinator_tools.audit.protocols.muffliato_gd.trajectories import StepReplay, replay_steps
from coordinator_tools.audit.protocols.muffliato_gd.utility import utility_report
from coordinator_tools.audit.records import Finding, NodeLog
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError
from node.protocols.muffliato_gd import NOISE_PURPOSE, PROTOCOL_NAME
from node.topology import Topology

# What a target is met by: the exact column, a proven bound, never the linearized value.
CALIBRATED_COLUMN = ("exact, the proven bound (reachable-step composition under the assumptions the report states), "
                     "so the target is met by a proven bound")


class SteppedLearning(Protocol):
    """What a gossip learning protocol's parameters say of its task and schedule (read by `learning_block`)."""

    @property
    def task(self) -> str: ...
    @property
    def steps(self) -> int: ...
    @property
    def adjacency(self) -> str: ...
    @property
    def clip(self) -> float: ...
    @property
    def batch(self) -> int | None: ...


def learning_block(params: SteppedLearning, gossip_rounds: int, **extra: object) -> dict[str, object]:
    """The report's `learning` block: what every gossip learning audit states of its task and schedule, then the
    protocol's own fields (`extra`)."""
    return {"learning": {"task": params.task, "steps": params.steps, "gossip_rounds": gossip_rounds,
                         "adjacency": params.adjacency, "clip": params.clip, "batch": params.batch, **extra}}


class MuffliatoGDAuditor(MuffliatoAuditor):
    """Muffliato-GD/SGD: synchronous gossip records on per-step graphs, a draw of noise every step."""

    name = PROTOCOL_NAME
    joint_views = False  # sensitivity over many steps and canary audits: coalitions not established here
    input_every_step = True
    averaging = False  # it learns a model: its utility block is `utility`'s, not the averaging one

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        problem = super().record_problem(topology, node, kind, entry)
        if problem is not None or kind not in ("sent", "received", "drop_out"):
            return problem
        if kind != "drop_out" and not entry.HasField("peer"):
            return None  # a sender-anonymous record names no peer to check
        step = entry.round // topology.protocol.gossip_rounds
        if entry.peer not in topology.neighbours_at(node, step):
            return f"node {entry.peer} is not a neighbour of node {node} at step {step}"
        return None

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        steps = [draw.step for draw in draws if draw.purpose == NOISE_PURPOSE]
        if steps != list(range(len(steps))):
            return f"'{NOISE_PURPOSE}' draws for steps {steps[:5]}..., expected one per step from 0 in order"
        if any(draw.mechanism not in ("", "gaussian") for draw in draws):
            return "a gradient noise draw is not gaussian"
        return None

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> Transcript:
        return rebuild_transcript(topology, logs, findings, rounds_per_step=topology.protocol.gossip_rounds)

    def account(self, run: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """A gradient per step, each followed by its draw but a last one its node died before drawing."""
        return f"{inputs} gradients for {len(draws)} draws" if inputs - len(draws) not in (0, 1) else None

    def checks(self, replay: Replay) -> list[Check]:
        """With the private logs: every payload recomputed (`replay_steps`), every logged gradient within the clip."""
        if replay.private is None:
            return []
        steps = self.replay_steps(replay)
        return [trajectory_check(steps.trajectories),
                clip_check(replay.topology.protocol, replay.private, steps.models)]

    def replay_steps(self, replay: Replay) -> StepReplay:
        """Every model sent recomputed from the private logs (`replay.private` is set): the checks' one input."""
        return replay_steps(replay)

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        params = replay.topology.protocol
        return learning_block(params, params.gossip_rounds,
                              schedule_comparison=schedule_comparison(replay.topology, losses, accounting))

    def utility(self, replay: Replay, data_dir: Path) -> dict[str, object]:
        return utility_report(replay.topology.protocol, dict(replay.logs), data_dir)

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel | None:
        return canary_model(run)

    def planned_geometry(self, transcript: Transcript, threat_model: ThreatModel) -> np.ndarray:
        """Every pair's σ-free factor of the exact column on a planned transcript: what calibrating σ needs."""
        return planned_geometry(transcript, threat_model)

    def input_bound(self, topology: Topology) -> None:
        return None  # its own clip check holds g - λθ at the recomputed model to C (`clip`)

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        if options.rounds is not None or options.schedules is not None or options.seed is not None:
            raise ConfigError(f"--rounds, --schedules and --seed do not apply to {self.name}: its steps and gossip "
                              "rounds are published in the topology")
        params = topology.protocol
        accelerated = params.accelerated if options.accelerated is None else options.accelerated
        transcript = planned_transcript(topology, accelerated=accelerated, rounds_per_step=params.gossip_rounds)
        sigma = params.sigma if options.sigma is None else options.sigma
        sensitivity = params.sensitivity if options.sensitivity is None else options.sensitivity
        details: dict[str, object] = {"steps": params.steps}
        if options.target is not None:
            sigmas = {"exact": calibrate_sigma(self.planned_geometry(transcript, options.threat_model),
                                               sensitivity=sensitivity, delta=options.delta, target=options.target),
                      **baseline_sigmas(topology.n, sensitivity=sensitivity, delta=options.delta,
                                        target=options.target, releases=params.steps)}
            sigma = sigmas["exact"]
            details["calibration"] = {"target_eps": options.target.epsilon, "rule": options.target.rule,
                                      "sigma": sigmas, "column": CALIBRATED_COLUMN}
        losses = self.account(
            transcript, sigma=sigma, sensitivity=sensitivity,
            alpha=params.alpha if options.alpha is None else options.alpha, delta=options.delta,
            conversion=options.conversion, threat_model=options.threat_model)  # fmt: skip
        headline = (f"n = {topology.n}, T = {params.steps} steps x K = {params.gossip_rounds} rounds "
                    f"({'accelerated' if accelerated else 'plain'}), sigma = {sigma:.6g} per step")
        if options.target is not None:
            headline += f"; sigma calibrated to {CALIBRATED_COLUMN}"
        return Plan(run=transcript, losses=losses, details=details, headline=headline)


AUDITOR = MuffliatoGDAuditor()  # registered by node.protocols.muffliato_gd
