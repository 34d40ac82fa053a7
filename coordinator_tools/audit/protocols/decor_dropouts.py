"""What a drop-out cost a protocol whose shared draws cancel in pairs: the terms left over, and their share of the MSE.

DECOR's edge terms and secure-neighbourhood's masks are both draws that two nodes add with opposite
signs. With every node to the end, each pair's draw enters the network's sum once with each sign,
so the sum moves by the independent draws alone. A node k that stops after c rounds breaks that
twice: its partners (DECOR: its neighbours; secure-neighbourhood: its co-neighbours) still add the
terms they share with it in rounds c, c + 1, ... (k adds no opposite one), and the share of earlier
rounds' terms that k held at its last mixing leaves with it. Both are read off the realized rows:
the survivors' outputs (the nodes S that completed every round) as rows on the inputs and the draws,
and a pairwise draw no longer cancels when its coefficient in Σ_{v∈S} x_v^T is not zero.

The utility's truth stays the mean x̄ of all n clipped inputs (the run was asked for everyone's
mean; the stopped node's input is part of it). The block says how much of the MSE the uncancelled
draws cause: they move the survivors' mean by m = (1/|S|) Σ_{v∈S} (pairwise part of x_v^T), a bias
every survivor's estimate converges to, and `uncancelled_mse` = ‖m‖²/D per coordinate, `share`
its ratio to the run's MSE (from the private logs' draws).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.protocols.linear_rounds import LinearRows
from coordinator_tools.audit.protocols.muffliato.transcript import Message, Transcript
from coordinator_tools.audit.records import Finding, PrivateSection
from coordinator_tools.audit.report import json_number, observer_means
from coordinator_tools.logview import number_ranges
from node.codec import from_tensor
from node.topology import Topology

CANCELLED = 1e-9  # a survivors'-sum coefficient below this (relative to the largest) is a cancelled draw
NO_DRAWS = "the uncancelled draws' share needs the private logs (--with-private-logs)"

RowsOf = Callable[[Transcript, Sequence[Message]], LinearRows]
OutputsOf = Callable[[Transcript, Sequence[int]], LinearRows]  # the given nodes' outputs x_v^T as rows


@dataclass(frozen=True)
class PairwiseTerms:
    """A protocol's cancelling draws: their private-log purpose, the round a draw's step names, and who adds them.

    `partners` (topology, node) are the nodes that share such draws with the node; `what` names the
    terms the partners add in a finding ("pairwise terms on their edges to it").
    """

    purpose: str
    steps_per_round: Callable[[int], int]  # n -> how many private-log steps one round's draws span
    partners: Callable[[Topology, int], Sequence[int]]
    partner_noun: str
    what: str

    def round_of(self, draw: tuple[int, int], n: int) -> int:
        """The round of a draw named (node, step)."""
        return draw[1] // self.steps_per_round(n)


def mixed_outputs(rows_of: RowsOf) -> OutputsOf:
    """Outputs of a broadcast round protocol: the realized last round's mixing of the values (w, T − 1)."""
    def outputs(run: Transcript, nodes: Sequence[int]) -> LinearRows:
        last = run.rounds - 1
        rows = rows_of(run, [(w, last) for w in range(run.n)])
        mixing = np.zeros((len(nodes), run.n))
        for i, v in enumerate(nodes):
            for w, weight in run.realized_row(v, last).items():
                mixing[i, w] = weight
        return replace(rows, inputs=mixing @ rows.inputs, noise=mixing @ rows.noise)
    return outputs


@dataclass(frozen=True)
class SurvivorSum:
    """Σ_{v∈S} x_v^T as rows (`inputs` over the n inputs, `noise` over the draws `rows` names) and S itself."""

    survivors: tuple[int, ...]
    rows: LinearRows  # the survivors' outputs, one row each
    inputs: np.ndarray
    noise: np.ndarray

    def uncancelled(self, purpose: str) -> np.ndarray:
        """Indices of the pairwise draws logged under `purpose` whose coefficient in the survivors' sum is not 0."""
        purposes = self.rows.purposes or ()
        pairwise = np.array([logged == purpose for logged in purposes], dtype=bool)
        largest = float(np.max(np.abs(self.rows.noise))) if self.rows.noise.size else 0.0
        return np.flatnonzero(pairwise & (np.abs(self.noise) > CANCELLED * max(largest, 1.0)))


def stopped_nodes(run: Transcript) -> list[int]:
    """The nodes that did not complete every round."""
    return [v for v in range(run.n) if run.completed_rounds(v) < run.rounds]


def survivor_sum(run: Transcript, outputs_of: OutputsOf) -> SurvivorSum:
    """The survivors' outputs summed."""
    survivors = tuple(v for v in range(run.n) if run.completed_rounds(v) == run.rounds)
    rows = outputs_of(run, survivors)
    return SurvivorSum(survivors, rows, rows.inputs.sum(axis=0), rows.noise.sum(axis=0))


def dropout_findings(run: Transcript, outputs_of: OutputsOf, terms: PairwiseTerms,
                     drawing_rounds: int) -> list[Finding]:
    """One finding per stopped node: its unpartnered rounds, and every round whose pairwise terms no longer cancel."""
    stopped = stopped_nodes(run)
    if not stopped or run.rounds == 0:
        return []
    total = survivor_sum(run, outputs_of)
    uncancelled = sorted({terms.round_of(total.rows.draws[i], run.n) for i in total.uncancelled(terms.purpose)})
    findings = []
    for node in stopped:
        completed = run.completed_rounds(node)
        missed = list(range(completed, drawing_rounds))
        peers = sorted(terms.partners(run.topology, node))
        unpartnered = (f"its {terms.partner_noun} {', '.join(map(str, peers))} added {terms.what} in "
                       f"rounds {number_ranges(missed)} that it never matched" if missed
                       else "it had drawn every pairwise term it shares")
        findings.append(Finding("warning", "uncancelled_pairwise_terms", node, (
            f"node {node} completed {completed} of {run.rounds} rounds: {unpartnered}, and the share of earlier "
            f"terms it held left with it; the pairwise terms of rounds "
            f"{number_ranges(uncancelled) if uncancelled else 'none'} no longer cancel in the survivors' sum")))
    return findings


def dropout_utility(run: Transcript, outputs_of: OutputsOf, terms: PairwiseTerms, private: PrivateSection | None,
                    mse: float | None, dimension: int) -> dict[str, object] | None:
    """The utility block's `drop_outs`: who stopped, the rounds whose terms no longer cancel, and their MSE share.

    None when every node completed every round.
    """
    stopped = stopped_nodes(run)
    if not stopped:
        return None
    total = survivor_sum(run, outputs_of)
    columns = total.uncancelled(terms.purpose)
    block: dict[str, object] = {
        "stopped": [{"node": v, "rounds_completed": run.completed_rounds(v)} for v in stopped],
        "survivors": len(total.survivors),
        "uncancelled_rounds": number_ranges(sorted({terms.round_of(total.rows.draws[i], run.n) for i in columns})),
        "uncancelled_draws": int(columns.size),
    }
    if private is None or mse is None or not total.survivors:
        return {**block, "uncancelled_mse": None, "share": None, "reason": NO_DRAWS if private is None else
                "no truth or no survivor to score"}
    logged = {(node, draw.purpose, int(draw.step)): from_tensor(draw.value)[:dimension]
              for node, draws in private.draws.items() for draw in draws}
    purposes = total.rows.purposes or ()
    values = np.array([logged.get((node, purpose, step), np.full(dimension, np.nan))
                       for (node, step), purpose in zip(total.rows.draws, purposes)]).reshape(-1, dimension)
    shift = total.noise[columns] @ values[columns] / len(total.survivors)
    uncancelled = float(np.mean(shift**2))
    return {**block, "uncancelled_mse": uncancelled, "share": uncancelled / mse if mse > 0 else None,
            "reason": None}


def planned_vs_run(account: Callable[..., PairwiseLosses], planned: Transcript, losses: PairwiseLosses,
                   accounting: Mapping[str, Any]) -> dict[str, object]:
    """Each observer's mean exact loss in the run (`losses`) and in `planned`, where every node completes every round.

    A drop-out changes what the survivors' views reveal: the report shows by how much.
    """
    expected = account(planned, **accounting)
    return {"mean_exact_rdp_per_observer": {
        "planned": [json_number(x) for x in observer_means(expected.exact_rdp_upper)],
        "run": [json_number(x) for x in observer_means(losses.exact_rdp_upper)]}}
