"""Auditing DECOR averaging: independent draws per node and round, and one shared draw per edge and round.

With P^t the realized mixing of round t (drop-outs moved to the diagonal), every value sent is
y^t = x^t + η^t + C v^t, C the n × |E| signed incidence (+1 at an edge's lower end, −1 at its
higher), and x^{t+1} = P^t y^t (a node mixes its own noisy value; one that stopped keeps x). Each
v_e^t is one column of the linear-Gaussian core held by both ends of e, at scale σ_cor/σ = the
published ratio; with `noisy_rounds` = k only rounds 0..k−1 have draws (columns), the later values
are mixtures of earlier ones. A curious node knows the draws on its own edges, a coalition those on any
member's edges, an eavesdropper none (`views`). The paper's SecLDP accountant is not one of the
report's columns (no paper column): the exact column is computed under every threat model.

The key shares that open a run are no round values: the rebuild sets them aside after checking
they are a node's public key in its published number of chunks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.plugin import LinearRoundAuditor, LinearRows, Message, Transcript
from coordinator_tools.audit.protocols.linear_rounds import received_values
from coordinator_tools.audit.protocols.muffliato.accountant import round_value
from coordinator_tools.audit.records import Finding, NodeLog
from node.message import GOSSIP, MessageId, kind_of
from node.pairwise_secrets import KEY_SHARE, key_chunks
from node.protocols.decor import NOISE_PURPOSE, PAIRWISE_PURPOSE, PROTOCOL_NAME, DecorParams, pairwise_step
from node.topology import Topology


def decor_params(topology: Topology) -> DecorParams:
    """The topology's DECOR parameters."""
    params = topology.protocol
    if not isinstance(params, DecorParams):
        raise TypeError(f"a {PROTOCOL_NAME} audit of a topology running {params.name!r}")  # type: ignore[attr-defined]
    return params


def edges(topology: Topology) -> list[tuple[int, int]]:
    """Every edge (i, j), i < j, in order: the pairwise draws' columns of a round."""
    return sorted({(min(v, w), max(v, w)) for v in range(topology.n) for w in topology.neighbours[v]})


class DecorAuditor(LinearRoundAuditor):
    """DECOR's values as rows: per round, n independent draws at σ and one shared draw per edge at σ_cor."""

    name = PROTOCOL_NAME
    noise_purpose = NOISE_PURPOSE
    joint_views = True  # a coalition's view is its members' rows stacked, knowing every draw a member holds

    def message_rows(self, run: Transcript, messages: Sequence[Message]) -> LinearRows:
        n, rounds, pairs = run.n, run.rounds, edges(run.topology)
        params = decor_params(run.topology)
        noisy = min(rounds, params.drawing_rounds)
        width = n + len(pairs)
        incidence = np.zeros((n, len(pairs)))
        for k, (i, j) in enumerate(pairs):
            incidence[i, k], incidence[j, k] = 1.0, -1.0
        ratio = params.sigma_cor_ratio
        draws: list[tuple[int, int]] = []
        holders: list[tuple[int, ...]] = []
        purposes: list[str] = []
        for t in range(noisy):
            draws += [(v, t) for v in range(n)] + [(i, pairwise_step(t, j, n)) for i, j in pairs]
            holders += [(v,) for v in range(n)]
            holders += pairs
            purposes += [NOISE_PURPOSE] * n + [PAIRWISE_PURPOSE] * len(pairs)
        state_inputs, state_noise = np.eye(n), np.zeros((n, width * noisy))
        rows: dict[Message, tuple[np.ndarray, np.ndarray]] = {}
        for t in range(rounds):
            sent_noise = state_noise.copy()
            if t < noisy:
                sent_noise[:, t * width:t * width + n] += np.eye(n)
                sent_noise[:, t * width + n:(t + 1) * width] += incidence
            rows.update({(w, t): (state_inputs[w], sent_noise[w]) for w in range(n)})
            mixing = np.zeros((n, n))
            stopped = [v for v in range(n) if t >= run.completed_rounds(v)]
            for v in range(n):
                if v in stopped:
                    mixing[v, v] = 1.0
                else:
                    for w, weight in run.realized_row(v, t).items():
                        mixing[v, w] = weight
            state_inputs = mixing @ state_inputs
            following = mixing @ sent_noise
            following[stopped] = state_noise[stopped]  # a node that stopped sends nothing more and keeps x
            state_noise = following
        inputs = np.array([rows[m][0] for m in messages]).reshape(len(messages), n)
        noise = np.array([rows[m][1] for m in messages]).reshape(len(messages), width * noisy)
        scales = np.tile(np.concatenate([np.ones(n), np.full(len(pairs), ratio)]), noisy)
        return LinearRows(inputs, noise, tuple(draws), scales, tuple(holders), tuple(purposes))

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        if kind in ("sent", "received", "rejected") and kind_of(entry) == KEY_SHARE:
            return key_share_problem(decor_params(topology).vector_length, entry)
        return super().record_problem(topology, node, kind, entry)

    def private_problem(self, draws: tuple[Any, ...]) -> str | None:
        """Its own draws as any round protocol's; the secrets and shared draws are checked by the payload check."""
        return super().private_problem(tuple(d for d in draws if d.purpose == NOISE_PURPOSE))

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> Transcript:
        """The rounds' transcript, the key shares set aside."""
        return super().rebuild(topology, {node: round_values_only(log) for node, log in logs.items()}, findings)

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel:
        """Each value's canary coordinates: its rows on the inputs, named (sender, round) as its receiver logs it."""
        model = self.linear_model(run)
        return CanaryModel(model, model.inputs, tuple(received_values(run)), round_value)


def key_share_problem(vector_length: int, entry: Any) -> str | None:
    """Why a key-share record is not one of a public key's chunks for vectors of this length, or None."""
    chunks = key_chunks(vector_length)
    identifier = MessageId.of(entry)
    if identifier.outside("sequence") or not 1 <= identifier.sequence <= chunks:
        return f"a key share is one of {chunks} chunks numbered from 1"
    return None


def round_values_only(log: NodeLog) -> NodeLog:
    """The log without its key-share records."""
    def gossip(entry: Any) -> bool:
        return kind_of(entry) == GOSSIP

    records = [(kind, entry) for kind, entry in log.records
               if kind not in ("sent", "received", "rejected") or gossip(entry)]
    return replace(log, records=records,
                   sent={key: record for key, record in log.sent.items() if key.kind == GOSSIP},
                   received={key: record for key, record in log.received.items() if key.kind == GOSSIP},
                   refused={key: record for key, record in log.refused.items() if key.kind == GOSSIP})


AUDITOR = DecorAuditor()
