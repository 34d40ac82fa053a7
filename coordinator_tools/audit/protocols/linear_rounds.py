"""Auditing a synchronous round protocol whose every message is linear in the inputs and the noise draws.

Such a protocol's nodes log one clipped input each, exchange one value per neighbour per round
at the round barrier (message kind gossip, id {round}; a neighbour missing from a round is
dropped for it, `node.plugin.BarrierRounds`), and draw Gaussian noise under one purpose, one
draw per step. Its auditor subclasses `LinearRoundAuditor` and says one thing: each value
(sender w, round t) as a row over the n inputs and the run's noise draws (`message_rows`). The
rest is shared with synchronous Muffliato: the records' rules, the realized `Transcript` (which
values each node mixed in and which reached it, drop-outs included), the exact column through
the linear-Gaussian core (`core`, `exact`: every draw its own column, owned by the node that drew
it; the local-DP and central baselines release each input once per draw of its node), every
logged payload recomputed from the private logs and the declared rows (so a wrong model fails
the audit instead of under-stating a loss), the plan (every value arrives) with σ calibration,
and the MSE of the outputs against the mean of the clipped inputs.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.averaging_utility import averaging_utility
from coordinator_tools.audit.checks import Check, trajectory_check
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.exact import ViewGeometry, view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.plan import Plan, PlanOptions, baseline_sigmas, calibrate_sigma
from coordinator_tools.audit.protocols.base import ProtocolAuditor, Replay
from coordinator_tools.audit.protocols.muffliato.rebuild import rebuild_transcript, round_record_problem
from coordinator_tools.audit.protocols.muffliato.transcript import Message, Transcript, planned_transcript
from coordinator_tools.audit.records import Finding, NodeLog
from coordinator_tools.audit.trajectories import PayloadComparison, missing_inputs
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.errors import ConfigError
from node.message import GOSSIP
from node.topology import Topology

NO_PAPER_BOUND = "paper: this protocol states no closed form (its paper columns are empty)"
PAYLOAD_CHECK = "every logged value is its declared linear combination of inputs and draws"
Draw = tuple[int, int]  # (the node that drew it, the step it was drawn at)


@dataclass(frozen=True)
class LinearRows:
    """Values as rows: `inputs` (m × n) on the nodes' clipped inputs, `noise` (m × k) on the draws `draws` names.

    `scales` gives each draw's std relative to the published σ (None: all at σ). `holders` gives, for a
    draw shared by the two ends of an edge (a pairwise secret, entering their values with opposite
    signs), both nodes; None: every draw known to its drawer alone. `purposes` names the private-log
    purpose each draw is logged under by the node `draws` names (None: all the auditor's `noise_purpose`).
    """

    inputs: np.ndarray
    noise: np.ndarray
    draws: tuple[Draw, ...]
    scales: np.ndarray | None = None
    holders: tuple[tuple[int, ...], ...] | None = None
    purposes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.noise.shape != (self.inputs.shape[0], len(self.draws)):
            raise ValueError(f"noise rows {self.noise.shape} do not match {self.inputs.shape[0]} values and "
                             f"{len(self.draws)} draws")
        if any(names is not None and len(names) != len(self.draws) for names in (self.holders, self.purposes)):
            raise ValueError("holders and purposes need one entry per draw")


def received_values(transcript: Transcript) -> list[Message]:
    """Every value some node received, by round then sender: the model's rows, in order."""
    return sorted({m for view in transcript.received for m in view}, key=lambda m: (m[1], m[0]))


def draws_per_node(model: LinearGaussianModel) -> np.ndarray:
    """How many draws of its own each node made: the noisy releases of its input the baselines compose.

    A draw shared with a neighbour (a pairwise secret) is no release: the two ends' terms cancel.
    """
    own = [owner for owner, holders in zip(model.owners, model.holders) if len(holders) == 1]
    return np.bincount(np.asarray(own, dtype=int), minlength=model.n)


class LinearRoundAuditor(ProtocolAuditor[Transcript]):
    """A synchronous round protocol whose values are linear in inputs and Gaussian draws: subclasses give the rows."""

    noise_purpose: ClassVar[str]  # the purpose its nodes log every draw under
    public_records = frozenset({"sent", "received", "drop_out", "rejected", "final_output"})
    payload_checks = (PAYLOAD_CHECK,)
    eavesdropper_views = True  # the exact column reads every view through `views`; `paper_column` gets the model

    @abstractmethod
    def message_rows(self, run: Transcript, messages: Sequence[Message]) -> LinearRows:
        """Each value (sender w, round t) of `messages` as it was computed in `run` (drop-outs included)."""

    def linear_model(self, run: Transcript) -> LinearGaussianModel:
        """y = A x + B η for every value some node received; every draw its own column, known to its holders."""
        messages = received_values(run)
        rows = self.message_rows(run, messages)
        index = {message: i for i, message in enumerate(messages)}
        received = tuple(tuple(sorted(index[m] for m in set(view))) for view in run.received)
        return LinearGaussianModel(n=run.n, inputs=rows.inputs, received=received, noise=rows.noise,
                                   noise_owner=tuple(owner for owner, _ in rows.draws), noise_scale=rows.scales,
                                   noise_holders=rows.holders)

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        return round_record_problem(self.name, topology.protocol.rounds, kind, entry)

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        steps = [draw.step for draw in draws if draw.purpose == self.noise_purpose]
        if steps != list(range(len(steps))) or len(steps) != len(draws):
            return f"expected '{self.noise_purpose}' draws at steps 0, 1, ... and nothing else"
        odd = [draw.mechanism for draw in draws if draw.mechanism not in ("", "gaussian")]
        return f"a {odd[0]!r} draw, expected gaussian" if odd else None

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> Transcript:
        return rebuild_transcript(topology, logs, findings)

    def account(self, run: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return self._account(run, self.linear_model(run), **options)

    def _account(self, run: Transcript, model: LinearGaussianModel, geometry: ViewGeometry | None = None,
                 **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        """Every column; baselines that release each input once per draw of its node."""
        releases = draws_per_node(model)
        paper, notes = self.paper_column(run, options.get("threat_model", ThreatModel()))
        return account_model(model, paper, notes=notes, geometry=geometry,
                             releases=float(releases[0]) if np.all(releases == releases[0]) else releases,
                             **options)

    def paper_column(self, run: Transcript, threat_model: ThreatModel) -> tuple[np.ndarray, list[str]]:
        """The paper column's σ-free factor [u, v] (`account_model`'s `paper_sum`) and its notes: none by default."""
        return np.full((run.n, run.n), np.nan), [NO_PAPER_BOUND]

    def checks(self, replay: Replay) -> list[Check]:
        return [] if replay.private is None else [self._payload_check(replay)]

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        return {}

    def utility(self, replay: Replay, data_dir: Path) -> dict[str, object]:
        """The MSE per coordinate of the outputs against the mean of the clipped inputs (no closed-form bound)."""
        return averaging_utility(replay, data_dir, muffliato_bound=False)

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        """The run in which every value arrives; with a target, at the smallest σ whose exact loss meets it."""
        if options.accelerated or options.schedules is not None or options.seed is not None:
            raise ConfigError(f"--accelerated, --schedules and --seed plan other protocols; this topology runs "
                              f"{self.name}")
        params = topology.protocol
        rounds = params.rounds if options.rounds is None else options.rounds
        run = planned_transcript(topology, rounds=rounds, accelerated=False)
        model = self.linear_model(run)
        sigma = params.sigma if options.sigma is None else options.sigma
        sensitivity = params.sensitivity if options.sensitivity is None else options.sensitivity
        details: dict[str, object] = {"rounds": rounds}
        geometry = None
        if options.target is not None:
            geometry = view_geometry(model, options.threat_model)
            target = options.target
            sigmas = {"exact": calibrate_sigma(geometry.upper, sensitivity=sensitivity, delta=options.delta,
                                               target=target),
                      **baseline_sigmas(topology.n, sensitivity=sensitivity, delta=options.delta, target=target,
                                        releases=int(np.max(draws_per_node(model))))}
            sigma = sigmas["exact"]
            details["calibration"] = {"target_eps": target.epsilon, "rule": target.rule, "sigma": sigmas}
        losses = self._account(run, model, geometry, sigma=sigma, sensitivity=sensitivity,
                               alpha=params.alpha if options.alpha is None else options.alpha, delta=options.delta,
                               threat_model=options.threat_model, conversion=options.conversion)
        return Plan(run=run, losses=losses, details=details,
                    headline=f"n = {topology.n}, T = {rounds}, sigma = {sigma:.6g}")

    def _payload_check(self, replay: Replay) -> Check:
        """Every value a log sent, received or refused, recomputed from the private logs through the declared rows."""
        private, run = replay.private, replay.realized
        assert private is not None
        logged = [(node, key.id.round, record.payload, "sent")
                  for node, log in replay.logs.items() for key, record in log.sent.items() if key.kind == GOSSIP]
        logged += [(key.peer, key.id.round, payload, f"received by {node}")
                   for node, log in replay.logs.items() for key, payload in log.values_in_view().items()
                   if key.kind == GOSSIP]
        messages = sorted({(sender, t) for sender, t, _, _ in logged})
        rows = self.message_rows(run, messages)
        drawers = {owner for owner, _ in rows.draws}
        needed = {v for v in range(run.n) if np.any(rows.inputs[:, v])} | drawers
        failed = missing_inputs(needed, set(private.inputs))
        if failed is not None:
            return Check(PAYLOAD_CHECK, False, trajectory_check(failed).detail)
        draws = {(node, draw.purpose, int(draw.step)): from_tensor(draw.value)
                 for node, node_draws in private.draws.items() for draw in node_draws}
        purposes = rows.purposes or (self.noise_purpose,) * len(rows.draws)
        length = len(next(iter(private.inputs.values())))
        inputs = np.array([private.inputs.get(v, np.zeros(length)) for v in range(run.n)])
        noise = np.array([draws.get((node, purpose, step), np.full(length, np.nan))
                          for (node, step), purpose in zip(rows.draws, purposes)]).reshape(-1, length)
        values = rows.inputs @ inputs + rows.noise @ noise
        comparison = PayloadComparison(float(np.max(np.abs(inputs))) or 1.0)
        index = {message: i for i, message in enumerate(messages)}
        for sender, t, tensor, kind in logged:
            comparison.compare(sender, tensor, values[index[(sender, t)]], f"{kind} record of node {sender}'s "
                                                                           f"round-{t} value")
        result = comparison.result()
        return Check(PAYLOAD_CHECK, result.ok, trajectory_check(result).detail)
