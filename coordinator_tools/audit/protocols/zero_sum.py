"""Auditing zero-sum averaging (Zip-DL): every draw Y_{a→k}^t one column, every receiver's value a row of its own.

Node a's round-t value for receiver j is y_{a→j}^t = x_a^t + Z_{a→j}^t with Z_{a→j} = Σ_k C_a[j][k] Y_{a→k}
(`node.protocols.zero_sum.zero_sum_coefficients`): each Y is one column of the linear-Gaussian core, held
by a alone at scale σ, so the zero-sum constraint is in the rows exactly as the node computed it and the
exact loss is the loss of the noise actually drawn. x^{t+1}_v = Σ_w P^t_vw y_{w→v}^t with P^t the realized
mixing (drop-outs moved to the diagonal, where v mixes its own kept share y_{v→v}); a node that stopped
keeps x. A curious node knows its own draws, a coalition its members', an eavesdropper none (`views`).

The paper column is Zip-DL's Theorem 5.12 (averaging, Algorithm 1), evaluated on the realized run:
RDP(a → v) ≤ (αΔ²/2) Σ_t Σ_{w ∈ Γ_v} ((W^t)_{w,a})² / Var(y_{w→v}^t), each message's marginal Gaussian loss
(Lemma 5.4) summed over v's view (Eq. 13), the closed neighbourhood included (w = v: v's own kept value).
Its conditions: a symmetric doubly stochastic W, the same σ at every node, and the view as the paper
defines it (Def. 5.2): the marginals take no account of the draws the observer holds, nor of the
correlation between messages that the zero-sum constraint creates, so it can fall below the exact loss
(the report flags those pairs). A coalition is Remark 5.10's extension (the members' views summed); an
external eavesdropper is outside the paper's threat model (a local adversary): no paper column there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.plugin import Addressed, LinearGaussianModel, LinearRoundAuditor, LinearRows, Transcript
from coordinator_tools.audit.views import coalition
from netdp.v1 import viewlog_pb2
from node.protocols.zero_sum import PROTOCOL_NAME, SHARE_PURPOSE, share_step, zero_sum_coefficients

PAPER_NOTE = ("paper: Zip-DL Theorem 5.12 (averaging), each received value's marginal Gaussian loss summed over the "
              "observer's closed-neighbourhood view; it ignores the draws the observer holds and the correlation of "
              "the zero-sum shares, so it may fall below the exact loss")
COALITION_NOTE = "paper: a coalition by Zip-DL Remark 5.10, its members' views summed"
EAVESDROPPER_NOTE = ("paper: none for an external eavesdropper, outside Zip-DL's threat model (a local adversary); "
                     "the exact column accounts it")


def drawing_rounds(run: Transcript) -> list[int]:
    """How many rounds each node drew in: those it completed, and one it began if a value of it reached anyone."""
    began = [run.completed_rounds(v) for v in range(run.n)]
    for view in run.received:
        for sender, t in view:
            began[sender] = max(began[sender], t + 1)
    return began


def round_release(row: Mapping[int, float], node: int) -> float:
    """What one round's values of `node` reveal of its input, in releases at σ: 1ᵀ Σ⁻¹ 1, Σ the covariance (in σ²)
    of the shares it sends, Z_{a→j} for j ≠ a.

    Given what it sent before, a node's round value is x_a + Z (its kept share is a function of the values it sent),
    so a node whose every value is seen loses this much per round, composed over rounds: the local-DP baseline. Its
    values' noise sums (weighted) to its kept share alone, so this is above one release at σ: 6 on a ring.
    """
    return share_release(row, [j for j in sorted(row) if j != node])


def share_release(row: Mapping[int, float], receivers: Sequence[int]) -> float:
    """1ᵀ Σ⁻¹ 1 (in releases at σ), Σ the covariance in σ² of the shares Z_{a→j}, j in `receivers`, of the node whose
    mixing row is `row`: what values carrying one common mean and those shares reveal of the mean.

    Any set of shares without the kept one has a nonsingular Σ (the zero sum's weights are positive on the kept
    share); zero-sum learning (`zero_sum_gd`) counts the shares of each step that reach a view.
    """
    covariance = share_covariance(row, receivers)
    if covariance.size == 0:
        return 0.0
    ones = np.ones(len(covariance))
    return float(ones @ np.linalg.solve(covariance, ones))


def share_covariance(row: Mapping[int, float], receivers: Sequence[int]) -> np.ndarray:
    """Σ (in σ²) of the shares Z_{a→j}, j in `receivers`, of the node whose mixing row is `row`: C_S C_Sᵀ."""
    coefficients = zero_sum_coefficients(row)
    shares = np.array([[coefficients[j][k] for k in sorted(row)] for j in receivers]).reshape(len(receivers), len(row))
    covariance: np.ndarray = shares @ shares.T
    return covariance


class ZeroSumAuditor(LinearRoundAuditor):
    """Zip-DL's values as rows per receiver: per round, one draw per member of each node's closed neighbourhood."""

    name = PROTOCOL_NAME
    noise_purpose = SHARE_PURPOSE
    per_receiver = True
    joint_views = True  # a coalition's view is its members' rows stacked, knowing every draw a member made

    def addressed_rows(self, run: Transcript, values: Sequence[Addressed]) -> LinearRows:
        n = run.n
        began = drawing_rounds(run)
        rows = {v: run.topology.weight_row(v) for v in range(n)}
        coefficients = {v: zero_sum_coefficients(row) for v, row in rows.items()}
        columns: dict[tuple[int, int, int], int] = {}  # (drawer a, round t, member k) -> Y_{a→k}^t's column
        for t in range(max(began, default=0)):
            for a in range(n):
                for k in sorted(rows[a]) if t < began[a] else ():
                    columns[(a, t, k)] = len(columns)
        draws = tuple((a, share_step(t, k, n)) for a, t, k in columns)

        def share(sender: int, t: int, receiver: int) -> np.ndarray:
            """Z_{sender→receiver}^t as a row over the draws."""
            noise = np.zeros(len(columns))
            for k, weight in coefficients[sender][receiver].items():
                noise[columns[(sender, t, k)]] = weight
            return noise

        state_inputs, state_noise = np.eye(n), np.zeros((n, len(columns)))
        wanted = {t for _, t, _ in values}
        found: dict[Addressed, tuple[np.ndarray, np.ndarray]] = {}
        for t in range(max(wanted, default=-1) + 1):
            found.update({(w, t, v): (state_inputs[w], state_noise[w] + share(w, t, v))
                          for w, value_round, v in values if value_round == t})
            following_inputs, following_noise = state_inputs.copy(), state_noise.copy()
            for v in range(n):
                if t < run.completed_rounds(v):  # a node that stopped keeps x
                    realized = run.realized_row(v, t).items()
                    following_inputs[v] = sum(weight * state_inputs[w] for w, weight in realized)
                    following_noise[v] = sum(weight * (state_noise[w] + share(w, t, v)) for w, weight in realized)
            state_inputs, state_noise = following_inputs, following_noise
        inputs = np.array([found[value][0] for value in values]).reshape(len(values), n)
        noise = np.array([found[value][1] for value in values]).reshape(len(values), len(columns))
        return LinearRows(inputs, noise, draws)

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """Every draw a Gaussian share of this protocol, each (round, member) step once."""
        if any(draw.purpose != SHARE_PURPOSE for draw in draws):
            return f"expected '{SHARE_PURPOSE}' draws and nothing else"
        if len({draw.step for draw in draws}) != len(draws):
            return f"a '{SHARE_PURPOSE}' step drawn twice"
        odd = [draw.mechanism for draw in draws if draw.mechanism not in ("", "gaussian")]
        return f"a {odd[0]!r} draw, expected gaussian" if odd else None

    def paper_column(self, run: Transcript, threat_model: ThreatModel) -> tuple[np.ndarray, list[str]]:
        """Theorem 5.12 for a curious node, Remark 5.10 for a coalition; none for an eavesdropper."""
        if threat_model.eavesdropper:
            return np.full((run.n, run.n), np.nan), [EAVESDROPPER_NOTE]
        return self.paper_sum(run, threat_model), [PAPER_NOTE, *([COALITION_NOTE] if threat_model.collusion else [])]

    def releases(self, run: Transcript, model: LinearGaussianModel) -> np.ndarray:
        """Each round's values of a node (`round_release`), every round it drew in."""
        per_round = np.array([round_release(run.topology.weight_row(v), v) for v in range(run.n)])
        released: np.ndarray = np.array(drawing_rounds(run)) * per_round
        return released

    def paper_sum(self, run: Transcript, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
        """Theorem 5.12's σ-free factor [a, v]: Σ over v's (or its coalition's) closed-neighbourhood view of
        (a's coefficient)² / (the value's noise variance in units of σ²); NaN where a observes."""
        n = run.n
        views = [sorted({*((w, t, v) for w, t in run.received[v]),
                         *((v, t, v) for t in range(run.completed_rounds(v)))}) for v in range(n)]
        values = sorted({value for view in views for value in view})
        rows = self.addressed_rows(run, values)
        variance = np.sum(np.square(rows.noise), axis=1)
        shares = np.divide(np.square(rows.inputs), variance[:, None], out=np.full(rows.inputs.shape, np.inf),
                           where=variance[:, None] > 0)
        shares[rows.inputs == 0] = 0.0
        index = {value: i for i, value in enumerate(values)}
        result = np.zeros((n, n))
        for v in range(n):
            members = coalition(v, threat_model, n)
            seen = sorted({index[value] for member in members for value in views[member]})
            result[:, v] = shares[seen].sum(axis=0)
            result[list(members), v] = np.nan
        return result

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel:
        return self.round_canaries(run)


AUDITOR = ZeroSumAuditor()
