"""Auditing a synchronous round protocol whose every message is linear in the inputs and the noise draws.

Such a protocol's nodes log one clipped input each, exchange one value per neighbour per round
at the round barrier (message kind gossip, id {round}; a neighbour missing from a round is
dropped for it, `node.plugin.BarrierRounds`), and draw Gaussian noise under one purpose, one
draw per step. Its auditor subclasses `LinearRoundAuditor` and says one thing: each value
(sender w, round t) as a row over the n inputs and the run's noise draws (`message_rows`), or,
where a round's value differs per receiver (`per_receiver`: zero-sum noise, masked sums), each
value (sender w, round t, receiver v) (`addressed_rows`; every receiver's copy is then a row of
its own). The rest is shared with synchronous Muffliato: the records' rules, the realized `Transcript` (which
values each node mixed in and which reached it, drop-outs included), the exact column through
the linear-Gaussian core (`core`, `exact`: every draw its own column, owned by the node that drew
it; the local-DP and central baselines release each input once per draw of its node), every
logged payload recomputed from the private logs and the declared rows (so a wrong model fails
the audit instead of under-stating a loss), the plan (every value arrives) with σ calibration,
and the MSE of the outputs against the mean of the clipped inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.averaging_utility import averaging_utility
from coordinator_tools.audit.checks import Check, trajectory_check
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel
from coordinator_tools.audit.exact import ViewGeometry, view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.plan import Plan, PlanOptions, baseline_sigmas, calibrate_sigma
from coordinator_tools.audit.protocols.base import ProtocolAuditor, Replay
from coordinator_tools.audit.protocols.muffliato.accountant import round_value
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
Addressed = tuple[int, int, int]  # (sender w, round t, receiver v): w's round-t value as v got it
EVERY_RECEIVER = -1  # the receiver of an Addressed value that is the same for every receiver


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


def addressed_values(run: Transcript, *, per_receiver: bool) -> list[Addressed]:
    """Every value some node received, by round, sender then receiver: the model's rows, in order.

    One row per (sender, round) for every receiver alike, unless the values differ per receiver."""
    if not per_receiver:
        return [(w, t, EVERY_RECEIVER) for w, t in received_values(run)]
    return sorted({(w, t, v) for v, view in enumerate(run.received) for w, t in view},
                  key=lambda value: (value[1], value[0], value[2]))


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

    # Whether a round's value differs per receiver: its rows come from `addressed_rows`, not `message_rows`.
    per_receiver: ClassVar[bool] = False

    def message_rows(self, run: Transcript, messages: Sequence[Message]) -> LinearRows:
        """Each value (sender w, round t) of `messages` as it was computed in `run` (drop-outs included)."""
        raise NotImplementedError(f"{self.name} declares its values per receiver (addressed_rows)")

    def addressed_rows(self, run: Transcript, values: Sequence[Addressed]) -> LinearRows:
        """With `per_receiver`: each value (sender w, round t, receiver v) of `values` as w computed it for v."""
        raise NotImplementedError(f"{self.name} declares one value per sender and round (message_rows)")

    def value_rows(self, run: Transcript, values: Sequence[Addressed]) -> LinearRows:
        """The rows of `values`, from the hook this protocol declares its values with."""
        if self.per_receiver:
            return self.addressed_rows(run, values)
        return self.message_rows(run, [(w, t) for w, t, _ in values])

    def addressed(self, sender: int, round_index: int, receiver: int) -> Addressed:
        """The model's name for `sender`'s round value as `receiver` got it."""
        return sender, round_index, (receiver if self.per_receiver else EVERY_RECEIVER)

    def linear_model(self, run: Transcript) -> LinearGaussianModel:
        """y = A x + B η for every value some node received; every draw its own column, known to its holders."""
        values = addressed_values(run, per_receiver=self.per_receiver)
        rows = self.value_rows(run, values)
        index = {value: i for i, value in enumerate(values)}
        received = tuple(tuple(sorted({index[self.addressed(w, t, v)] for w, t in view}))
                         for v, view in enumerate(run.received))
        return LinearGaussianModel(n=run.n, inputs=rows.inputs, received=received, noise=rows.noise,
                                   noise_owner=tuple(owner for owner, _ in rows.draws), noise_scale=rows.scales,
                                   noise_holders=rows.holders)

    def round_canaries(self, run: Transcript) -> CanaryModel:
        """Each value's canary coordinates for a protocol's `canary_model`: its rows on the inputs, named (sender,
        round) as its receiver logs it (one value per sender and round reaches a receiver: unique in its view)."""
        model = self.linear_model(run)
        labels = tuple((w, t) for w, t, _ in addressed_values(run, per_receiver=self.per_receiver))
        return CanaryModel(model, model.inputs, labels, round_value)

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
        """Every column: the protocol's paper column, and baselines that compose each node's `releases`."""
        paper, notes = self.paper_column(run, options.get("threat_model", ThreatModel()))
        releases = self.releases(run, model)
        return account_model(model, paper, notes=notes, geometry=geometry,
                             releases=float(releases[0]) if np.all(releases == releases[0]) else releases,
                             **options)

    def paper_column(self, run: Transcript, threat_model: ThreatModel) -> tuple[np.ndarray, list[str]]:
        """The paper bound's σ-free factor [u, v] under `threat_model` and its notes; none by default (NaN)."""
        return np.full((run.n, run.n), np.nan), [NO_PAPER_BOUND]

    def releases(self, run: Transcript, model: LinearGaussianModel) -> np.ndarray:
        """Per node, how many releases of its input at σ the local-DP and central baselines compose: by default one
        per draw of its own (a draw shared with a neighbour, a pairwise secret's, is no release)."""
        return draws_per_node(model)

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
                                        releases=float(np.max(self.releases(run, model))))}
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
        logged = [(self.addressed(node, key.id.round, key.peer), record.payload, f"sent record of node {node}")
                  for node, log in replay.logs.items() for key, record in log.sent.items()
                  if key.kind == GOSSIP and key.peer is not None]
        logged += [(self.addressed(key.peer, key.id.round, node), payload, f"received by {node} record of node "
                    f"{key.peer}") for node, log in replay.logs.items()
                   for key, payload in log.values_in_view().items() if key.kind == GOSSIP and key.peer is not None]
        values = sorted({value for value, _, _ in logged})
        rows = self.value_rows(run, values)
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
        recomputed = rows.inputs @ inputs + rows.noise @ noise
        comparison = PayloadComparison(float(np.max(np.abs(inputs))) or 1.0)
        index = {value: i for i, value in enumerate(values)}
        for value, tensor, what in logged:
            comparison.compare(value[0], tensor, recomputed[index[value]], f"{what}'s round-{value[1]} value")
        result = comparison.result()
        return Check(PAYLOAD_CHECK, result.ok, trajectory_check(result).detail)
