"""Auditing secure-neighbourhood gossip: node noise per round, and one Gaussian mask per (receiver, pair, round).

With the realized rounds, every value j sends v in round t is
z_{j→v}^t = W_vj (x_j^t + η_j^t) + Σ_{k ∈ N(v), k ≠ j} s_jk m^{(v)}_{jk,t}, and
x_v^{t+1} = W'_vv y_v^t + Σ_{j used} z_{j→v}^t (W' the realized row: a dropped neighbour's weight on
the diagonal, its partners' masks left in). Each η_j^t is a column held by j; each mask is a column
at scale σ_m/σ = the published mask ratio, held by both ends of its pair. So the exact column counts
what the Gaussian masks actually drawn leave visible, with no assumption that a mask hides a value
perfectly: a curious v holds no mask of the values it receives, a coalition every mask a member holds
(a member that is a co-neighbour of j unmasks j's value to the others), an eavesdropper none. A node
that stops leaves masks that no longer cancel: named and measured as DECOR's terms (`decor_dropouts`).

The `paper` column is Koskela & Kulkarni's analysis (arXiv 2505.19969) of gossip averaging with
secure neighbourhood summation: node v's view is the sequence of its neighbourhood sums
S_v^t = Σ_j W_vj y_j^t (together with what it knows: its own input and noise), a linear map of
the inputs plus Gaussian noise, so the view is exactly a Gaussian mechanism with
μ²_{u→v} = (Δ/σ)² (A e_u)ᵀ (B Bᵀ)⁺ (A e_u) for the sums' rows A on the inputs and B on the noise
(their "secure summation" view; for a doubly stochastic W the sensitivity grows as O(T), like
central aggregation). It is evaluated on the realized schedule through the same core. Its
conditions: the summation is ideal (v learns the sum and nothing else about the terms, which
Gaussian masks at a finite scale do not give, so `paper` ≤ `exact` and the gap is the masks'
leak), one honest-but-curious observer that does not collude, and no eavesdropper: under
`--colluders` or `--threat-model eavesdropper` the paper's guarantee does not cover the view and
the column is empty, with a note saying so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.exact import ViewGeometry, view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.plugin import Addressed, LinearRoundAuditor, LinearRows, Transcript
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.decor_dropouts import (
    PairwiseTerms,
    dropout_findings,
    dropout_utility,
    planned_vs_run,
    stopped_nodes,
)
from coordinator_tools.audit.protocols.key_shares import KeySharesAside, key_share_problem
from coordinator_tools.audit.protocols.linear_rounds import draws_per_node
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.records import Finding, NodeLog
from node.message import kind_of
from node.pairwise_secrets import KEY_SHARE, edge_sign
from node.protocols.secure_neighbourhood import (
    MASK_PURPOSE,
    NOISE_PURPOSE,
    PROTOCOL_NAME,
    SecureNeighbourhoodParams,
    co_neighbours,
    mask_step,
)
from node.topology import Topology

PAPER_NOTE = ("paper: Koskela & Kulkarni (arXiv 2505.19969), gossip averaging with secure neighbourhood summation: "
              "each observer's view is its neighbourhood sums, a Gaussian mechanism; it assumes ideal summation "
              "(the masks hide each term perfectly), so exact at or above it is the Gaussian masks' leak")
PAPER_NOT_COVERED = ("paper: Koskela & Kulkarni's secure-summation analysis covers one curious node that does not "
                     "collude; it does not cover a coalition or an eavesdropper (empty column, exact still computed)")

MASK_TERMS = PairwiseTerms(MASK_PURPOSE, steps_per_round=lambda n: n * n,
                           partners=lambda topology, node: co_neighbours(topology, node), partner_noun="co-neighbours",
                           what="masks shared with it")


def secure_params(topology: Topology) -> SecureNeighbourhoodParams:
    """The topology's secure-neighbourhood parameters."""
    params = topology.protocol
    if not isinstance(params, SecureNeighbourhoodParams):
        raise TypeError(f"a {PROTOCOL_NAME} audit of a topology running {params.name!r}")  # type: ignore[attr-defined]
    return params


@dataclass(frozen=True)
class MaskColumns:
    """One round's draw columns: n node draws, then one mask per (receiver v, pair j < k of v's neighbours)."""

    n: int
    masks: tuple[tuple[int, int, int], ...]  # (v, j, k), j < k

    @classmethod
    def of(cls, topology: Topology) -> MaskColumns:
        masks = []
        for v in range(topology.n):
            around = sorted(topology.neighbours[v])
            masks += [(v, j, k) for a, j in enumerate(around) for k in around[a + 1:]]
        return cls(topology.n, tuple(masks))

    @property
    def width(self) -> int:
        return self.n + len(self.masks)

    def index(self) -> dict[tuple[int, int, int], int]:
        """(v, j, k) -> the mask's column within its round, both orders of the pair."""
        columns = {mask: self.n + i for i, mask in enumerate(self.masks)}
        return columns | {(v, k, j): column for (v, j, k), column in columns.items()}


def mask_draw(run: Transcript, round_index: int, receiver: int, lower: int, higher: int) -> tuple[int, int]:
    """A mask named as a private log holds it: by the pair's lower end, or by its higher end where the lower one
    stopped before round t (the mask its partner added alone)."""
    n = run.n
    if run.completed_rounds(lower) > round_index or run.completed_rounds(higher) <= round_index:
        return lower, mask_step(round_index, receiver, higher, n)
    return higher, mask_step(round_index, receiver, lower, n)


def masked_rounds(run: Transcript, ratio: float) -> tuple[dict[Addressed, tuple[np.ndarray, np.ndarray]], LinearRows]:
    """Every value (j, t, v) sent in `run`, and every node's output x_v^T, as rows on the inputs and every draw."""
    topology, n, rounds = run.topology, run.n, run.rounds
    columns = MaskColumns.of(topology)
    width, mask_column = columns.width, columns.index()
    draws: list[tuple[int, int]] = []
    holders: list[tuple[int, ...]] = []
    purposes: list[str] = []
    for t in range(rounds):
        draws += [(v, t) for v in range(n)] + [mask_draw(run, t, v, j, k) for v, j, k in columns.masks]
        holders += [(v,) for v in range(n)] + [(j, k) for _, j, k in columns.masks]
        purposes += [NOISE_PURPOSE] * n + [MASK_PURPOSE] * len(columns.masks)
    state_inputs, state_noise = np.eye(n), np.zeros((n, width * rounds))
    rows: dict[Addressed, tuple[np.ndarray, np.ndarray]] = {}
    for t in range(rounds):
        noisy = state_noise.copy()
        noisy[:, t * width:t * width + n] += np.eye(n)
        sent: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for v in range(n):
            weights = topology.weight_row(v)
            for j in topology.neighbours[v]:
                noise = weights[j] * noisy[j]
                for k in topology.neighbours[v]:
                    if k != j:
                        noise[t * width + mask_column[v, j, k]] += edge_sign(j, k)
                sent[j, v] = (weights[j] * state_inputs[j], noise)
                rows[j, t, v] = sent[j, v]
        following_inputs, following_noise = state_inputs.copy(), state_noise.copy()
        for v in range(n):
            if t >= run.completed_rounds(v):
                continue  # a node that stopped sends nothing more and keeps x
            row = run.realized_row(v, t)
            following_inputs[v] = row[v] * state_inputs[v]
            following_noise[v] = row[v] * noisy[v]
            for j in row:
                if j != v:
                    following_inputs[v] += sent[j, v][0]
                    following_noise[v] += sent[j, v][1]
        state_inputs, state_noise = following_inputs, following_noise
    scales = np.tile(np.concatenate([np.ones(n), np.full(len(columns.masks), ratio)]), rounds)
    return rows, LinearRows(state_inputs, state_noise, tuple(draws), scales, tuple(holders), tuple(purposes))


def value_rows(run: Transcript, values: Sequence[Addressed], ratio: float) -> LinearRows:
    """Each value (j, t, v) of `values` as computed in `run`: rows on the inputs and on every round's draws."""
    rows, outputs = masked_rounds(run, ratio)
    return replace(outputs, inputs=np.array([rows[value][0] for value in values]).reshape(len(values), run.n),
                   noise=np.array([rows[value][1] for value in values]).reshape(len(values), outputs.noise.shape[1]))


def output_rows(run: Transcript, nodes: Sequence[int]) -> LinearRows:
    """The outputs x_v^T of `nodes` as rows: a drop-out's masks that no longer cancel show in their sum."""
    _, outputs = masked_rounds(run, secure_params(run.topology).mask_ratio)
    return replace(outputs, inputs=outputs.inputs[list(nodes)], noise=outputs.noise[list(nodes)])


def summation_model(run: Transcript) -> LinearGaussianModel:
    """The paper's view: node v sees S_v^t = Σ_{j used} W_vj y_j^t each round it completed, and no single term."""
    topology, n, rounds = run.topology, run.n, run.rounds
    state_inputs, state_noise = np.eye(n), np.zeros((n, n * rounds))
    sums_inputs: list[np.ndarray] = []
    sums_noise: list[np.ndarray] = []
    received: list[list[int]] = [[] for _ in range(n)]
    for t in range(rounds):
        noisy = state_noise.copy()
        noisy[:, t * n:(t + 1) * n] += np.eye(n)
        following_inputs, following_noise = state_inputs.copy(), state_noise.copy()
        for v in range(n):
            if t >= run.completed_rounds(v):
                continue
            row, weights = run.realized_row(v, t), topology.weight_row(v)
            used = [j for j in row if j != v]
            if used:
                received[v].append(len(sums_inputs))
                sums_inputs.append(sum((weights[j] * state_inputs[j] for j in used), np.zeros(n)))
                sums_noise.append(sum((weights[j] * noisy[j] for j in used), np.zeros(n * rounds)))
            following_inputs[v] = row[v] * state_inputs[v] + (sums_inputs[-1] if used else 0.0)
            following_noise[v] = row[v] * noisy[v] + (sums_noise[-1] if used else 0.0)
        state_inputs, state_noise = following_inputs, following_noise
    return LinearGaussianModel(n=n, inputs=np.array(sums_inputs).reshape(-1, n), received=tuple(map(tuple, received)),
                               noise=np.array(sums_noise).reshape(-1, n * rounds),
                               noise_owner=tuple(v for _ in range(rounds) for v in range(n)))


def paper_factor(run: Transcript, threat_model: ThreatModel) -> np.ndarray:
    """The paper's σ-free factor [u, v] (μ² = (Δ/σ)² factor); NaN where its guarantee does not reach."""
    if threat_model.eavesdropper or threat_model.collusion:
        return np.full((run.n, run.n), np.nan)
    return view_geometry(summation_model(run), threat_model).upper


class SecureNeighbourhoodAuditor(KeySharesAside[Transcript], LinearRoundAuditor):
    """Values per receiver: per round, n node draws at σ and one mask per (receiver, pair) at the mask ratio."""

    name = PROTOCOL_NAME
    noise_purpose = NOISE_PURPOSE
    joint_views = True  # a coalition's view is its members' rows stacked, knowing every mask a member holds
    per_receiver = True

    def addressed_rows(self, run: Transcript, values: Sequence[Addressed]) -> LinearRows:
        return value_rows(run, values, secure_params(run.topology).mask_ratio)

    def peers(self, topology: Topology, node: int) -> frozenset[int]:
        """Its neighbours, and the co-neighbours it agreed a secret with."""
        return frozenset(topology.neighbours[node]) | frozenset(co_neighbours(topology, node))

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        if kind in ("sent", "received", "rejected") and kind_of(entry) == KEY_SHARE:
            return key_share_problem(secure_params(topology).vector_length, entry)
        peer = entry.claimed_sender if kind == "rejected" else getattr(entry, "peer", None)
        if kind in ("sent", "received", "rejected") and peer not in topology.neighbours[node]:
            return f"only key shares pass between node {node} and node {peer}, which is no neighbour"
        return super().record_problem(topology, node, kind, entry)

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> Transcript:
        """The rounds' transcript (the key shares set aside); a stopped node's masks left in are findings."""
        run = super().rebuild(topology, logs, findings)
        findings.extend(dropout_findings(run, output_rows, MASK_TERMS, run.rounds))
        return run

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        """With a stopped node, the `secure_neighbourhood` block: how the drop-out moved each observer's mean exact
        loss from the run in which every node completes every round."""
        run = replay.realized
        if not stopped_nodes(run):
            return {}
        planned = planned_transcript(run.topology, rounds=run.rounds, accelerated=False)
        return {"secure_neighbourhood": {"planned_vs_run": planned_vs_run(self.account, planned, losses, accounting)}}

    def utility(self, replay: Replay, data_dir: Path) -> dict[str, object]:
        """The MSE against the mean of all n clipped inputs, and with a drop-out what its masks left in cost."""
        block = super().utility(replay, data_dir)
        mse = block["mse"]
        dropped = dropout_utility(replay.realized, output_rows, MASK_TERMS, replay.private,
                                  mse if isinstance(mse, float) else None, replay.topology.protocol.dimension)
        return block if dropped is None else {**block, "drop_outs": dropped}

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel:
        return self.round_canaries(run)

    def _account(self, run: Transcript, model: LinearGaussianModel, geometry: ViewGeometry | None = None,
                 **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        """Every column, the paper's from the neighbourhood sums where its guarantee reaches."""
        factor = paper_factor(run, options.get("threat_model", ThreatModel()))
        note = PAPER_NOT_COVERED if np.all(np.isnan(factor)) else PAPER_NOTE
        releases = draws_per_node(model)
        return account_model(model, factor, notes=[note], geometry=geometry,
                             releases=float(releases[0]) if np.all(releases == releases[0]) else releases,
                             **options)


AUDITOR = SecureNeighbourhoodAuditor()
