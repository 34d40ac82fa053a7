"""Auditing noisy gossip: every value sent is linear in the clipped inputs and the round draws.

With P^t the realized mixing of round t (drop-outs moved to the diagonal) split into its
diagonal D^t and the rest O^t, the state is x^{t+1} = P^t x^t + O^t η^t, so every state, and
every value y_w^t = x_w^t + η_w^t, is a row over the n inputs and the n·T draws. netdp's
`LinearRoundAuditor` turns those rows into the exact column, checks every logged payload
against them, plans runs and scores the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from noisy_gossip_node import NOISE_PURPOSE, PROTOCOL_NAME

from coordinator_tools.audit.plugin import LinearRoundAuditor, LinearRows, Message, Transcript


class NoisyGossipAuditor(LinearRoundAuditor):
    """Noisy gossip's values as rows: one draw per node per round, each at the published σ."""

    name = PROTOCOL_NAME
    noise_purpose = NOISE_PURPOSE
    joint_views = True  # a coalition's view is its members' rows stacked: the same linear model

    def message_rows(self, run: Transcript, messages: Sequence[Message]) -> LinearRows:
        n, rounds = run.n, run.rounds
        draws = tuple((v, t) for t in range(rounds) for v in range(n))  # column t·n + v: η_v^t
        state_inputs, state_noise = np.eye(n), np.zeros((n, n * rounds))
        rows: dict[Message, tuple[np.ndarray, np.ndarray]] = {}
        for t in range(rounds):
            sent_noise = state_noise.copy()
            sent_noise[:, t * n:(t + 1) * n] += np.eye(n)  # y^t = x^t + η^t
            rows.update({(w, t): (state_inputs[w], sent_noise[w]) for w in range(n)})
            mixing = np.zeros((n, n))
            for v in range(n):
                if t < run.completed_rounds(v):
                    for w, weight in run.realized_row(v, t).items():
                        mixing[v, w] = weight
                else:
                    mixing[v, v] = 1.0  # a node that stopped keeps its value
            off_diagonal = mixing - np.diag(np.diag(mixing))
            state_inputs = mixing @ state_inputs
            state_noise = mixing @ state_noise + off_diagonal @ (sent_noise - state_noise)
        inputs = np.array([rows[m][0] for m in messages]).reshape(len(messages), n)
        noise = np.array([rows[m][1] for m in messages]).reshape(len(messages), n * rounds)
        return LinearRows(inputs, noise, draws)


AUDITOR = NoisyGossipAuditor()
