"""An agent's own privacy budget, at most the published one (`netdp-node --budget`, personalized CD).

The published topology fixes every agent's (ε̄_i, δ̄_i), and its neighbours and the auditor rely
on it: an agent may choose to be more private than that, never less, so `--budget` may only lower
it. The agent then runs with the published parameters except its own budget (its ledger splits
and enforces the lower one), and says so in public: every private personalized-CD agent writes
the budget it runs under into its run header (`agent_budget`). The auditor checks its spends
against that budget when it is the stricter, and a restarted agent must start with it again
(`node.viewlog.read_resumable`: another budget is another header, refused).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import Any

from netdp.v1 import viewlog_pb2
from node.errors import ConfigError
from node.protocols.personalized_cd import PROTOCOL_NAME, AgentBudget, PersonalizedCDParams

HEADER_KEY = "agent_budget"


@dataclass(frozen=True)
class BudgetRequest:
    """The budget an agent asks for on its command line; `delta` None keeps the published δ̄_i."""

    epsilon: float
    delta: float | None = None


def parse_budget(text: str) -> BudgetRequest:
    """`EPSILON[,DELTA]` -> BudgetRequest (the argparse type of `--budget`)."""
    epsilon, _, delta = text.partition(",")
    try:
        request = BudgetRequest(float(epsilon), float(delta) if delta else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected EPSILON[,DELTA], e.g. 2 or 2,1e-5, got {text!r}") from None
    if not (math.isfinite(request.epsilon) and request.epsilon > 0.0):
        raise argparse.ArgumentTypeError(f"the budget's epsilon must be finite and > 0, got {epsilon!r}")
    if request.delta is not None and not 0.0 <= request.delta < 1.0:
        raise argparse.ArgumentTypeError(f"the budget's delta must be in [0, 1), got {delta!r}")
    return request


def own_parameters(params: Any, node: int, request: BudgetRequest | None) -> Any:
    """The public parameters agent `node` runs with: the published ones, its budget lowered to `request`.

    ConfigError (one line) for a budget above the published one, or a protocol without per-agent budgets.
    """
    if request is None:
        return params
    if not isinstance(params, PersonalizedCDParams):
        raise ConfigError(f"--budget sets a {PROTOCOL_NAME} agent's own budget; {params.name} has none to lower")
    published = params.budget_of(node)
    if published is None:
        raise ConfigError(f"--budget: this {PROTOCOL_NAME} run is non-private (no epsilon published), so there "
                          "is no budget to lower")
    epsilon, delta = request.epsilon, published[1] if request.delta is None else request.delta
    if epsilon > published[0] or delta > published[1]:
        raise ConfigError(f"--budget {epsilon:g},{delta:g} is above node {node}'s published budget "
                          f"({published[0]:g},{published[1]:g}): an agent may only lower it, since its neighbours "
                          "and the auditor rely on the published one")
    others = tuple(budget for budget in params.budgets if budget.node != node)
    return params.model_copy(update={"budgets": (*others, AgentBudget(node=node, epsilon=epsilon, delta=delta))})


def header_fields(params: Any, node: int) -> dict[str, object]:
    """What the run header says of the budget agent `node` runs under (nothing outside private personalized CD)."""
    budget = params.budget_of(node) if isinstance(params, PersonalizedCDParams) else None
    return {} if budget is None else {HEADER_KEY: {"epsilon": budget[0], "delta": budget[1]}}


def logged_budget(header: viewlog_pb2.RunHeader) -> tuple[float, float] | None:
    """The (ε̄_i, δ̄_i) a log's header says its agent ran under; None if it says none (or nothing readable)."""
    try:
        entry = json.loads(header.public_parameters_json).get(HEADER_KEY)
        epsilon, delta = float(entry["epsilon"]), float(entry["delta"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return (epsilon, delta) if epsilon >= 0.0 and 0.0 <= delta <= 1.0 else None
