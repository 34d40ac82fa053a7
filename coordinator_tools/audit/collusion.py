"""Collusion: a coalition C of observers accounted as one observer, for every source outside C.

The spec's threat model: C's view is the union of its members' views. `views.observer_view`
builds that view whenever the threat model names C: the stacked message rows of every member,
with every member's input (and, by default, noise) removed from the unknowns, as a single
observer's own are. So the exact column, Theorem 1's sum and the attack all read the joint view
through it, and this module only checks that a coalition makes sense, says which protocols may
be accounted that way, and reduces the joint accounting to one row per source u ∉ C beside
each member's single-observer loss, with the invariants (best member alone ≤ joint ≤ LDP).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from coordinator_tools.audit.checks import ATOL, RTOL, Check, paper_undercounts
from coordinator_tools.audit.losses import THREAT_MODELS, PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.base import ProtocolAuditor
from coordinator_tools.audit.report import json_number
from node.errors import ConfigError
from node.idset import describe_nodes, parse_ids

PAPER_NOTE = ("collusion: paper column is Theorem 1's per-message sum over the union of the coalition's "
              "messages (its composition argument covers any set of received messages; the paper states "
              "one observer)")
NO_ATTACK_NOTE = "collusion: no model-attack column (the attack was not asked for)"
PLAN_NOTE = ("collusion: accounted at the plan's sigma (a target calibrates single observers); a plan has no "
             "model-attack column")


def add_colluders_argument(parser: argparse.ArgumentParser) -> None:
    """`--colluders IDS`, shared by `netdp audit` and `netdp plan`."""
    parser.add_argument("--colluders", type=_colluders, default=(), metavar="IDS",
                        help="account these observers (e.g. 3,5 or 0-3) as one coalition seeing the union of their "
                        "views: the report's collusion block gives every other node's loss to them together "
                        "(synchronous and randomized Muffliato)")


def _colluders(text: str) -> tuple[int, ...]:
    """parse_ids for argparse: a bad set is a usage error with parse_ids' own message."""
    try:
        return parse_ids(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def coalition_members(colluders: Sequence[int], n: int) -> tuple[int, ...]:
    """The coalition as sorted distinct ids; ConfigError unless it is 2..n-1 nodes of the run."""
    members = tuple(sorted(set(colluders)))
    outside = [member for member in members if not 0 <= member < n]
    if outside:
        raise ConfigError(f"--colluders: {describe_nodes(outside)} not in this run's nodes 0..{n - 1}")
    if len(members) < 2:
        raise ConfigError("--colluders: a coalition needs at least two nodes (one node is the single-observer audit)")
    if len(members) == n:
        raise ConfigError("--colluders: every node colludes, so no source is left to account")
    return members


def require_joint_views(auditor: ProtocolAuditor) -> None:
    """Refuse a protocol whose accountant has not been shown to account a coalition's joint view soundly."""
    if not auditor.joint_views:
        raise ConfigError(f"--colluders is not supported for protocol {auditor.name}: its accounting of a "
                          "coalition's joint view is not established")


def require_eavesdropper_views(auditor: ProtocolAuditor, colluders: Sequence[int]) -> None:
    """Refuse an eavesdropper for a protocol whose accountant does not read views through `views`, or beside
    colluders (an outsider colludes with no node)."""
    if colluders:
        raise ConfigError("--threat-model eavesdropper and --colluders are two threat models; choose one")
    if not auditor.eavesdropper_views:
        raise ConfigError(f"--threat-model eavesdropper is not supported for protocol {auditor.name}: its "
                          "accountant does not account an outsider's view of every message")


def threat_model_argument(parser: argparse.ArgumentParser) -> None:
    """--threat-model: a curious node (default; a coalition with --colluders) or an external eavesdropper."""
    parser.add_argument("--threat-model", choices=THREAT_MODELS, default=THREAT_MODELS[0],
                        help="who observes: curious-observer (default: each node, knowing its own input and every "
                        "draw it holds, pairwise secrets included; --colluders adds a coalition) or eavesdropper "
                        "(an outsider who sees every message and knows no input and no draw)")


def coalition_threat_model(threat_model: ThreatModel, members: tuple[int, ...]) -> ThreatModel:
    """The same threat model with `members` observing together."""
    return replace(threat_model, collusion=members)


def coalition_attack_pairs(members: tuple[int, ...], n: int) -> list[tuple[int, int]]:
    """(u, first member) for every source u outside the coalition: every member's column is the coalition's."""
    return [(u, members[0]) for u in range(n) if u not in members]


@dataclass(frozen=True)
class Collusion:
    """The coalition's joint losses (accounted with `coalition_threat_model`) beside the single-observer ones.

    `hops` [u, v] are the graph's hop distances; the report's u → C distance is the nearest member's.
    """

    members: tuple[int, ...]
    joint: PairwiseLosses
    single: PairwiseLosses
    hops: np.ndarray
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.joint.threat_model.collusion != self.members:
            raise ValueError(f"joint losses were accounted for colluders {self.joint.threat_model.collusion}, "
                             f"not {self.members}")

    @property
    def sources(self) -> list[int]:
        """The nodes whose loss to the coalition is accounted: every node outside it."""
        return [u for u in range(self.joint.n) if u not in self.members]

    def column(self, name: str) -> np.ndarray:
        """The joint loss u → C of every source (NaN where the column has no value)."""
        matrix = getattr(self.joint, name)
        return np.full(len(self.sources), np.nan) if matrix is None else matrix[self.sources, self.members[0]]

    def best_member(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(which member, its single-observer loss) of the member that learns most about each source alone."""
        matrix = getattr(self.single, name)[np.ix_(self.sources, self.members)]
        index = np.argmax(np.where(np.isnan(matrix), -np.inf, matrix), axis=1)
        return np.asarray(self.members)[index], matrix[np.arange(len(self.sources)), index]

    def checks(self) -> list[Check]:
        """Every member alone ≤ the coalition ≤ LDP, per source (intervals: the joint upper end against the
        member's lower end, and against LDP). A source no member has a lower end for (a bound with no value it
        reaches, or not computed) is no evidence: it is not checked, and the line says so as a warning."""
        members = self.single.exact_rdp_lower[np.ix_(self.sources, self.members)]
        below_member = self.column("exact_rdp_upper")[:, None] < members * (1.0 - RTOL) - ATOL
        ldp = self.joint.ldp_pairs("rdp")[self.sources, self.members[0]]
        above_ldp = self.column("exact_rdp_upper") > ldp * (1.0 + RTOL) + ATOL
        who = self.describe()
        return [
            _source_check(f"coalition {who}: joint exact >= each member's own", below_member.any(axis=1),
                          self.sources, unchecked=np.isnan(members).all(axis=1)),
            _source_check(f"coalition {who}: joint exact <= LDP", above_ldp, self.sources),
        ]

    def describe(self) -> str:
        """`nodes 3,5`."""
        return describe_nodes(self.members)

    def sentence(self) -> str:
        """Who colluded and what it cost, in one sentence for people."""
        eps = self.column("exact_eps_upper")
        worst = int(np.nanargmax(np.where(np.isnan(eps), -np.inf, eps)))
        member, alone = self.best_member("exact_eps_upper")
        return (f"{self.describe().capitalize()} colluded: their joint view is accounted as one observer; the "
                f"most exposed source, node {self.sources[worst]}, loses exact eps {eps[worst]:.4g} to them "
                f"together against {alone[worst]:.4g} to node {member[worst]} alone "
                f"(LDP {self.joint.ldp_pairs('eps')[self.sources[worst], self.members[0]]:.4g}).")

    def paper_notes(self, paper: np.ndarray) -> list[str]:
        """What the paper column is: Theorem 1's sum over the union, or, where the protocol's paper gives no
        coalition a value, its own account of why (the joint losses' paper notes)."""
        if np.any(np.isfinite(paper)):
            return [PAPER_NOTE]
        return [f"collusion: {note}" for note in self.joint.notes if note.startswith("paper:")]

    def to_json(self) -> dict[str, object]:
        """The report's `collusion` block (SCHEMA.md)."""
        columns = {name: self.column(name) for name in (
            "paper_rdp", "paper_eps", "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper",
            "exact_rdp_lower", "exact_eps_lower", "model_attack_eps_lower")}
        columns["ldp_rdp"] = self.joint.ldp_pairs("rdp")[self.sources, self.members[0]]
        columns["ldp_eps"] = self.joint.ldp_pairs("eps")[self.sources, self.members[0]]
        flags = {"reconstructable": self.column("reconstructable"), "ill_conditioned": self.column("ill_conditioned"),
                 "paper_undercounts": paper_undercounts(self.joint)[self.sources, self.members[0]]}
        member, alone = self.best_member("exact_eps_upper")
        hops = self.hops[np.ix_(self.sources, self.members)].min(axis=1)
        losses = [
            {"source": u, "hop_distance": int(hops[i]) if np.isfinite(hops[i]) else None,
             **{name: json_number(values[i]) for name, values in columns.items()},
             **{name: bool(values[i]) for name, values in flags.items()},
             "best_member": int(member[i]), "best_member_exact_eps_upper": json_number(alone[i])}
            for i, u in enumerate(self.sources)
        ]
        eps = columns["exact_eps_upper"]
        worst = int(np.nanargmax(np.where(np.isnan(eps), -np.inf, eps)))
        finite = (alone > 0) & np.isfinite(alone) & np.isfinite(eps)
        gains = eps[finite] / alone[finite]
        return {
            "colluders": list(self.members),
            "losses": losses,
            "summary": {
                "sentence": self.sentence(),
                "sources": len(self.sources),
                "exact_method": self.joint.exact_method,
                "worst_source": self.sources[worst],
                "max_exact_eps_upper": json_number(eps[worst]),
                "mean_exact_rdp_upper": json_number(np.nansum(columns["exact_rdp_upper"]) / self.joint.n),
                "max_best_member_exact_eps_upper": json_number(np.nanmax(alone)),
                "max_gain_over_best_member": json_number(gains.max()) if gains.size else None,
                "reconstructable_sources": int(np.count_nonzero(flags["reconstructable"])),
                "paper_undercounts": int(np.count_nonzero(flags["paper_undercounts"])),
                "attacked_sources": int(np.count_nonzero(~np.isnan(columns["model_attack_eps_lower"]))),
            },
            "notes": [*self.paper_notes(columns["paper_rdp"]), *self.notes],
        }


def _source_check(name: str, failed: np.ndarray, sources: Sequence[int], unchecked: np.ndarray | None = None) -> Check:
    """A per-source check: ok when no source failed, else which did; a warning when it held only because some
    sources (`unchecked`) had no value to check."""
    bad = [sources[i] for i in np.flatnonzero(failed)]
    skipped = 0 if unchecked is None else int(np.count_nonzero(unchecked))
    if not bad and skipped:
        return Check(name, True, f"the {len(sources) - skipped} of {len(sources)} sources with a member's lower end "
                                 f"({skipped} have none, so not checked)", warning=True)
    if not bad:
        return Check(name, True, f"all {len(sources)} sources")
    return Check(name, False, f"{len(bad)} sources fail, first: node {bad[0]}")
