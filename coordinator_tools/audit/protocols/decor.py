"""Auditing DECOR averaging: independent draws per node and round, and one shared draw per edge and round.

With P^t the realized mixing of round t (drop-outs moved to the diagonal), every value sent is
y^t = x^t + η^t + C v^t, C the n × |E| signed incidence (+1 at an edge's lower end, −1 at its
higher), and x^{t+1} = P^t y^t (a node mixes its own noisy value; one that stopped keeps x). Each
v_e^t is one column of the linear-Gaussian core held by both ends of e, at scale σ_cor/σ = the
published ratio; with `noisy_rounds` = k only rounds 0..k−1 have draws (columns), the later values
are mixtures of earlier ones. A curious node knows the draws on its own edges, a coalition those on any
member's edges, an eavesdropper none (`views`). The exact column is computed under every threat
model; the paper column is DECOR's SecLDP accountant (`decor_accountant`) where its conditions hold,
and a drop-out's uncancelled pairwise terms are named and measured (`decor_dropouts`).

The key shares that open a run are no round values: the rebuild sets them aside after checking
they are a node's public key in its published number of chunks (`key_shares`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.plugin import LinearRoundAuditor, LinearRows, Message, PairwiseLosses, Transcript
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.decor_accountant import THEOREM, Condition, SecLdp, secldp
from coordinator_tools.audit.protocols.decor_dropouts import (
    PairwiseTerms,
    dropout_findings,
    dropout_utility,
    mixed_outputs,
    planned_vs_run,
    stopped_nodes,
)
from coordinator_tools.audit.protocols.key_shares import KeySharesAside
from coordinator_tools.audit.protocols.linear_rounds import received_values
from coordinator_tools.audit.protocols.muffliato.accountant import round_value
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.records import Finding, NodeLog
from node.protocols.decor import NOISE_PURPOSE, PAIRWISE_PURPOSE, PROTOCOL_NAME, DecorParams, pairwise_step
from node.topology import Topology

AVERAGING = Condition("Decor's D-SGD", False, "this run averages one input per node by gossip; Theorem 1 states "
                      "the privacy of D-SGD, whose every step releases a fresh clipped gradient")


def decor_params(topology: Topology) -> DecorParams:
    """The topology's DECOR parameters."""
    params = topology.protocol
    if not isinstance(params, DecorParams):
        raise TypeError(f"a {PROTOCOL_NAME} audit of a topology running {params.name!r}")  # type: ignore[attr-defined]
    return params


def edges(topology: Topology) -> list[tuple[int, int]]:
    """Every edge (i, j), i < j, in order: the pairwise draws' columns of a round."""
    return sorted({(min(v, w), max(v, w)) for v in range(topology.n) for w in topology.neighbours[v]})


def edge_draw(run: Transcript, round_index: int, lower: int, higher: int) -> tuple[int, int]:
    """An edge's round-t draw named as a private log holds it: by its lower end, or by its higher end where the
    lower one stopped before round t (the draw its neighbour added alone)."""
    if run.completed_rounds(lower) > round_index or run.completed_rounds(higher) <= round_index:
        return lower, pairwise_step(round_index, higher, run.n)
    return higher, pairwise_step(round_index, lower, run.n)


def secldp_run(run: Transcript, threat_model: ThreatModel) -> SecLdp:
    """DECOR's Theorem 1 on a run: its value, and whether its conditions hold (this auditor's runs average)."""
    params = decor_params(run.topology)
    every_step = Condition("both noises every step", params.noisy_rounds is None,
                           "every round draws both noises" if params.noisy_rounds is None
                           else f"noisy_rounds = {params.noisy_rounds}: later rounds draw nothing")
    return secldp(run.topology, threat_model, steps=min(run.rounds, params.drawing_rounds),
                  ratio=params.sigma_cor_ratio, conditions=(AVERAGING, every_step, every_node_to_the_end(run)))


def every_node_to_the_end(run: Transcript) -> Condition:
    """Theorem 1's condition that every node takes every step with all its neighbours (no drop-out)."""
    stopped = stopped_nodes(run)
    dropped = sum(len(run.neighbours(v, t)) - len(used) for v in range(run.n) for t, used in enumerate(run.used[v]))
    holds = not stopped and not dropped
    return Condition("every node completes every step", holds, "no drop-out" if holds else
                     f"{len(stopped)} nodes stopped early ({', '.join(map(str, stopped)) or 'none'}), "
                     f"{dropped} neighbour values missing from completed rounds")


EDGE_TERMS = PairwiseTerms(PAIRWISE_PURPOSE, steps_per_round=lambda n: n,
                           partners=lambda topology, node: topology.neighbours[node], partner_noun="neighbours",
                           what="pairwise terms on their edges to it")


class DecorAuditor(KeySharesAside[Transcript], LinearRoundAuditor):
    """DECOR's values as rows: per round, n independent draws at σ and one shared draw per edge at σ_cor."""

    name = PROTOCOL_NAME
    noise_purpose = NOISE_PURPOSE
    joint_views = True  # a coalition's view is its members' rows stacked, knowing every draw a member holds

    def __init__(self) -> None:
        self._models: PerRun[LinearGaussianModel] = PerRun()
        self._rows: PerRun[dict[tuple[Message, ...], LinearRows]] = PerRun()

    def message_rows(self, run: Transcript, messages: Sequence[Message]) -> LinearRows:
        """The rows of `messages`, unrolled once per run and request, read-only (a drop-out's findings and its
        utility block ask for the same last round)."""
        asked = self._rows.get(run, dict)
        key = tuple(messages)
        if key not in asked:
            rows = unrolled_rows(run, key)
            rows.inputs.setflags(write=False)
            rows.noise.setflags(write=False)
            asked[key] = rows
        return asked[key]

    def linear_model(self, run: Transcript) -> LinearGaussianModel:
        """The run's model, built once per run: an audit accounts it at σ, again at 2σ (the check that more noise
        never leaks more) and reads it for its canaries."""
        return self._models.get(run, lambda: super(DecorAuditor, self).linear_model(run))

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> Transcript:
        """The rounds' transcript (the key shares set aside); a stopped node's uncancelled terms are findings."""
        run = super().rebuild(topology, logs, findings)
        findings.extend(dropout_findings(run, mixed_outputs(self.message_rows), EDGE_TERMS,
                                         decor_params(topology).drawing_rounds))
        return run

    def paper_column(self, run: Transcript, threat_model: ThreatModel) -> tuple[np.ndarray, list[str]]:
        """Theorem 1's factor where it covers the run; else NaN, with the conditions that failed in the note."""
        theorem = secldp_run(run, threat_model)
        if theorem.covers:
            return theorem.column(), [f"paper: {THEOREM}"]
        return theorem.column(), [f"paper: {THEOREM}; it does not cover this run, so the paper columns are empty: "
                                  f"{theorem.reason}"]

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        """The `decor` block: Theorem 1 with its conditions and its value, covered or not; with a drop-out, how it
        moved each observer's mean exact loss from the run in which every node completes every round."""
        run = replay.realized
        theorem = secldp_run(run, accounting["threat_model"])
        block: dict[str, object] = {"paper": theorem.to_json(sigma=accounting["sigma"],
                                                             sensitivity=accounting["sensitivity"],
                                                             alpha=accounting["alpha"])}
        if not every_node_to_the_end(run).holds:
            block["planned_vs_run"] = planned_vs_run(
                self.account, planned_transcript(run.topology, rounds=run.rounds, accelerated=False), losses,
                accounting)
        return {"decor": block}

    def utility(self, replay: Replay, data_dir: Path) -> dict[str, object]:
        """The MSE against the mean of all n clipped inputs, and with a drop-out what its uncancelled terms cost."""
        block = super().utility(replay, data_dir)
        mse = block["mse"]
        dropped = dropout_utility(replay.realized, mixed_outputs(self.message_rows), EDGE_TERMS, replay.private,
                                  mse if isinstance(mse, float) else None, replay.topology.protocol.dimension)
        return block if dropped is None else {**block, "drop_outs": dropped}

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel:
        """Each value's canary coordinates: its rows on the inputs, named (sender, round) as its receiver logs it."""
        model = self.linear_model(run)
        return CanaryModel(model, model.inputs, tuple(received_values(run)), round_value)


def unrolled_rows(run: Transcript, messages: Sequence[Message]) -> LinearRows:
    """The rows of `messages` as computed in `run` (drop-outs included), written into arrays allocated once as the
    rounds unroll: a round's state is copied only into the rows asked for (at n = 256, T = 20 the noise rows alone
    hold a gigabyte), and a round's product reads only the columns drawn so far."""
    n, rounds, pairs = run.n, run.rounds, edges(run.topology)
    params = decor_params(run.topology)
    noisy = min(rounds, params.drawing_rounds)
    width = n + len(pairs)
    wanted: dict[int, tuple[list[int], list[int]]] = {}
    for position, (w, t) in enumerate(messages):
        if not (0 <= w < n and 0 <= t < rounds):
            raise ValueError(f"no value ({w}, {t}) in a run of {n} nodes and {rounds} rounds")
        positions, senders = wanted.setdefault(t, ([], []))
        positions.append(position)
        senders.append(w)
    incidence = np.zeros((n, len(pairs)))
    for k, (i, j) in enumerate(pairs):
        incidence[i, k], incidence[j, k] = 1.0, -1.0
    ratio = params.sigma_cor_ratio
    draws: list[tuple[int, int]] = []
    holders: list[tuple[int, ...]] = []
    purposes: list[str] = []
    for t in range(noisy):
        draws += [(v, t) for v in range(n)] + [edge_draw(run, t, i, j) for i, j in pairs]
        holders += [(v,) for v in range(n)]
        holders += pairs
        purposes += [NOISE_PURPOSE] * n + [PAIRWISE_PURPOSE] * len(pairs)
    inputs, noise = np.zeros((len(messages), n)), np.zeros((len(messages), width * noisy))
    state_inputs, state_noise = np.eye(n), np.zeros((n, width * noisy))
    for t in range(rounds):
        sent_noise = state_noise.copy()
        if t < noisy:
            sent_noise[:, t * width:t * width + n] += np.eye(n)
            sent_noise[:, t * width + n:(t + 1) * width] += incidence
        if t in wanted:
            positions, senders = wanted[t]
            inputs[positions], noise[positions] = state_inputs[senders], sent_noise[senders]
        mixing = np.zeros((n, n))
        stopped = [v for v in range(n) if t >= run.completed_rounds(v)]
        for v in range(n):
            if v in stopped:
                mixing[v, v] = 1.0
            else:
                for w, weight in run.realized_row(v, t).items():
                    mixing[v, w] = weight
        state_inputs = mixing @ state_inputs
        drawn = min(t + 1, noisy) * width  # the later rounds' columns are still zero: no product reads them
        following = np.zeros_like(sent_noise)
        following[:, :drawn] = mixing @ sent_noise[:, :drawn]
        following[stopped] = state_noise[stopped]  # a node that stopped sends nothing more and keeps x
        state_noise = following
    scales = np.tile(np.concatenate([np.ones(n), np.full(len(pairs), ratio)]), noisy)
    return LinearRows(inputs, noise, tuple(draws), scales, tuple(holders), tuple(purposes))


T = TypeVar("T")


class PerRun(Generic[T]):
    """One value per live run, built on first use and dropped with the run (runs are frozen but not hashable)."""

    def __init__(self) -> None:
        self._values: dict[int, T] = {}

    def get(self, run: object, build: Callable[[], T]) -> T:
        key = id(run)
        if key not in self._values:
            self._values[key] = build()
            weakref.finalize(run, self._values.pop, key, None)
        return self._values[key]


AUDITOR = DecorAuditor()
