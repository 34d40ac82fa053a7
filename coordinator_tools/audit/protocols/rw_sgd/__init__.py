"""Auditing random-walk DP-SGD (ICML 2024 Alg. 1): the model is a token, so the token walks' records and chain.

The logs are the token slot's, so the replay, the custody chain, the rebuild and the linear
model are the token summations' (`token_sum`), with a gradient step for a contribution (noise
only past the cap) and no result; what differs is here:

* `theory`: Thm 3 (anonymous and sender-known) and the orders where it holds, amplification by
  iteration on realized walks, communicability;
* `ex_ante`: the realized-path bound over simulated walks, an estimate with its interval;
* `accountant`: every column per pair;
* `plan`: the run ex ante, before it happens.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.checks import Check
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.plan import Plan, PlanOptions
from coordinator_tools.audit.protocols.base import Replay, gradient_bound
from coordinator_tools.audit.protocols.rw_sgd import theory
from coordinator_tools.audit.protocols.rw_sgd.accountant import account, theorem3_matrix
from coordinator_tools.audit.protocols.rw_sgd.plan import plan_walk
from coordinator_tools.audit.protocols.rw_sgd.utility import utility_report
from coordinator_tools.audit.protocols.token_sum import TokenSumAuditor
from coordinator_tools.audit.protocols.token_sum.records import draws_problem
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from netdp.v1 import viewlog_pb2
from node.protocols import rw_sgd
from node.topology import Topology

CAP_CHECK = "contribution cap holds in every private log"


class RwSgdAuditor(TokenSumAuditor):
    """Random-walk DP-SGD: a model token of T hops, a noisy gradient step at each, no result."""

    name = rw_sgd.PROTOCOL_NAME

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        return draws_problem(draws, rw_sgd.NOISE_PURPOSE)

    def input_bound(self, topology: Topology) -> float | None:
        return gradient_bound(topology)

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """A gradient for each of the first visits (all of them below the cap), a draw for every visit but a last
        one its holder died in after logging its gradient (the token is lost there: `token_lost`)."""
        return f"{inputs} gradients for {len(draws)} visits" if inputs > len(draws) + 1 else None

    def account(self, run: TokenRun, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def checks(self, replay: Replay) -> list[Check]:
        checks = super().checks(replay)
        if replay.private is not None:
            checks.append(cap_check(replay))
        return checks

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        run: TokenRun = replay.realized
        return {"token_walk": {"tokens": [history.to_json() for history in run.histories]},
                "rw_sgd": {**walk_facts(run.topology, run.visits(), accounting),
                           "ex_ante": losses.columns["ex_ante"].sampling}}

    def utility(self, replay: Replay, data_dir: Path) -> dict[str, object]:
        """The walk's model over steps, and the last holder's, against a trusted curator and nodes alone."""
        run: TokenRun = replay.realized
        holders = run.holders()
        last = int(holders[-1]) if run.total == replay.topology.protocol.steps and holders[-1] >= 0 else None
        return utility_report(replay.topology.protocol, dict(replay.logs), last, data_dir)

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        return plan_walk(topology, options)


def walk_facts(topology: Topology, contributions: np.ndarray, accounting: Mapping[str, Any]) -> dict[str, object]:
    """The report's `rw_sgd` block: Thm 3's validity and size, and contributions (the graph's communicability is a
    column of the pairs file)."""
    params = topology.protocol
    alpha, multiplier = accounting["alpha"], accounting["sigma"] / accounting["sensitivity"]
    single = theorem3_matrix(topology, alpha, multiplier)
    return {
        "sender": params.sender, "contribution_cap": params.contribution_cap,
        "contributions": contributions.tolist(),
        "theorem3": {"order_valid": bool(theory.order_valid(alpha, multiplier)), "noise_multiplier": multiplier,
                     "largest_valid_order": theory.largest_valid_order(multiplier), **_spread(single)},
    }


def cap_check(replay: Replay) -> Check:
    """No node logged more gradient steps than the cap (every private log read), nor more than its visits."""
    cap = replay.topology.protocol.contribution_cap
    run: TokenRun = replay.realized
    visits = np.bincount(run.holders()[run.holders() >= 0], minlength=run.n)
    over = {v: len(inputs) for v, inputs in replay.private.inputs.items()
            if len(inputs) > min(visits[v], cap if cap is not None else visits[v])}
    if over:
        v, count = next(iter(over.items()))
        return Check(CAP_CHECK, False, f"{len(over)} nodes took too many gradient steps, e.g. node {v}: {count} "
                                       f"for {visits[v]} visits, cap {cap}")
    return Check(CAP_CHECK, True, f"every node's gradient steps <= min(visits, cap {cap}); at most "
                                  f"{max((len(i) for i in replay.private.inputs.values()), default=0)}")


def _spread(single: np.ndarray) -> dict[str, float | None]:
    """Mean and max of Thm 3's single-contribution matrix over the pairs; null outside the theorem's orders."""
    if np.isnan(single).all():
        return {"single_contribution_mean": None, "single_contribution_max": None}
    return {"single_contribution_mean": float(np.nanmean(single)), "single_contribution_max": float(np.nanmax(single))}


AUDITOR = RwSgdAuditor()  # registered by node.protocols.rw_sgd
