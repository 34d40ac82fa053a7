"""Auditing personalized and private P2P learning (AISTATS 2018): per-agent budgets, releases, utility.

* `run`: each agent's releases and the ε it logged for each (or inferred), from the view logs;
* `accountant`: every pair's columns from the source's composed releases (Thm 1, PLD, RDP);
* `simulate`: purely local models and CD run centrally, the baselines of a run;
* `utility`: mean test accuracy of the run, of local models and of non-private CD;
* `replay_check`: with the private logs and the data, every broadcast model recomputed by update (6);
* `canary_model`: an audit run's broadcasts unrolled to the agents' canaries and Laplace draws (the
  empirical column), each agent's m_i read from its canary record.

The protocol's own check is the paper's promise to each agent: the ε it logged, composed by
Thm 1 at its δ̄_i, stays within its ε̄_i, and no model left an agent without its spend logged first.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.checks import Check, trajectory_check
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.plan import Plan, PlanOptions
from coordinator_tools.audit.protocols.base import ProtocolAuditor, Replay
from coordinator_tools.audit.protocols.personalized_cd.accountant import account, pld_epsilon
from coordinator_tools.audit.protocols.personalized_cd.canary_model import agent_sizes, canary_model
from coordinator_tools.audit.protocols.personalized_cd.replay_check import check_updates
from coordinator_tools.audit.protocols.personalized_cd.run import (
    BroadcastRun,
    planned_run,
    rebuild_run,
    record_problem,
)
from coordinator_tools.audit.protocols.personalized_cd.utility import utility_report
from coordinator_tools.audit.records import Finding, NodeLog
from coordinator_tools.audit.report import json_number
from netdp.v1 import viewlog_pb2
from node.budget import theorem1_epsilon, within
from node.errors import ConfigError
from node.protocols.personalized_cd import (
    NOISE_PURPOSE,
    PROTOCOL_NAME,
    WARM_START_PURPOSE,
    PersonalizedCDParams,
)
from node.topology import Topology

BUDGET_CHECK = "no agent spent beyond its budget"
UNPAID = frozenset({"release_without_budget", "budget_out_of_order"})


class PersonalizedCDAuditor(ProtocolAuditor[BroadcastRun]):
    """Personalized CD: broadcasts of models, a budget record before each, Laplace draws in the private logs."""

    name = PROTOCOL_NAME
    public_records = frozenset({"sent", "received", "rejected", "budget", "step_inputs", "final_output"})
    input_every_step = True  # one clipped gradient per update

    def record_problem(self, topology: Topology, node: int, kind: str, entry: Any) -> str | None:
        return record_problem(topology, node, kind, entry)

    def input_bound(self, topology: Topology) -> None:
        return None  # examples clipped in l1, then the regulariser's 2 lambda_i theta: no fixed bound on the gradient

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """The warm start's draw (step 0) if there is one, then gradient draws of increasing updates, all Laplace.

        An update may lack its draw: an agent that crashed after paying for it (before drawing) and
        resumed goes on with the next update (`--resume`); the replay check still wants a draw for
        every update that broadcast.
        """
        warm = draws[:1] if draws and draws[0].purpose == WARM_START_PURPOSE else ()
        gradients = draws[len(warm):]
        steps = [draw.step for draw in gradients]
        increasing = all(step >= 0 for step in steps[:1]) and all(a < b for a, b in zip(steps, steps[1:]))
        if (any(draw.step != 0 for draw in warm) or not increasing
                or any(draw.purpose != NOISE_PURPOSE for draw in gradients)):
            return (f"draws for steps {steps[:5]}..., expected an optional '{WARM_START_PURPOSE}' draw at step 0, "
                    f"then '{NOISE_PURPOSE}' draws of increasing updates from 0")
        if any(draw.mechanism != "laplace" for draw in draws):
            return "a noise draw is not laplace"
        return None

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """An input per release (the warm start's local model, a gradient per update) before its noise draw
        (private): an input may lack its draw (the last one not yet drawn, or one a crash cut short)."""
        if draws and inputs < len(draws):
            return f"{inputs} gradients for {len(draws)} noise draws"
        return None

    def rebuild(self, topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> BroadcastRun:
        return rebuild_run(topology, logs, findings)

    def account(self, run: BroadcastRun, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def checks(self, replay: Replay) -> list[Check]:
        checks = [budget_check(replay)] if replay.topology.protocol.private else []
        if replay.private is not None:
            checks.append(trajectory_check(check_updates(replay)))
        return checks

    def canary_model(self, run: BroadcastRun, planted: PlantedCanaries) -> CanaryModel:
        """The broadcasts unrolled (`canary_model`), with every agent's m_i from its canary record's magnitude."""
        return canary_model(run, agent_sizes(run.topology.protocol, planted.magnitudes))

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        return {"personalized": agent_facts(replay.realized)}

    def utility(self, replay: Replay, data_dir: Path) -> dict[str, object]:
        return utility_report(replay.topology, replay.final_estimates, data_dir)

    def plan(self, topology: Topology, options: PlanOptions) -> Plan:
        if options.target is not None or options.rounds is not None or options.schedules is not None:
            raise ConfigError(f"--target, --rounds and --schedules do not apply to {self.name}: each agent's budget "
                              "and updates are published in the topology")
        params: PersonalizedCDParams = topology.protocol
        run = planned_run(topology)
        losses = account(run, sigma=params.sigma if options.sigma is None else options.sigma,
                         sensitivity=params.sensitivity if options.sensitivity is None else options.sensitivity,
                         alpha=params.alpha if options.alpha is None else options.alpha, delta=options.delta,
                         threat_model=options.threat_model)
        budget = "non-private" if not params.private else f"budget eps {params.epsilon:g}, delta {params.delta:g}"
        return Plan(run=run, losses=losses, details={"personalized": agent_facts(run)},
                    headline=f"n = {topology.n}, {params.updates} updates per agent, {budget}")


def agent_facts(run: BroadcastRun) -> dict[str, object]:
    """The report's `personalized` block: every agent's budget, what it spent, and who heard it directly."""
    params: PersonalizedCDParams = run.topology.protocol
    agents = []
    for agent in range(run.n):
        spent = run.spends.get(agent, [])
        budget = run.budget_of(agent)
        fact: dict[str, object] = {"node": agent, "updates": run.updates(agent),
                                   "spend_inferred": agent in run.inferred,
                                   "heard_by": int(run.heard[agent].sum()) if run.heard is not None else None}
        if budget is not None:
            epsilon, delta = budget
            fact |= {"budget": {"epsilon": epsilon, "delta": delta},
                     "planned_epsilons": list(params.release_epsilons(agent, run.n)),
                     "epsilon_sum": float(np.sum(spent)), "theorem1": theorem1_epsilon(spent, delta),
                     "pld": json_number(pld_epsilon(spent, delta)), "within_budget": within(spent, epsilon, delta)}
        agents.append(fact)
    return {"private": params.private, "mu": params.mu, "lipschitz": params.lipschitz,
            "updates_planned": params.updates, "agents": agents}


def budget_check(replay: Replay) -> Check:
    """Every agent's logged spends compose (Thm 1 at its δ̄_i) within its ε̄_i, and every release was paid first."""
    run: BroadcastRun = replay.realized
    unpaid = [finding for finding in replay.consistency if finding.kind in UNPAID]
    if unpaid:
        return Check(BUDGET_CHECK, False, f"{len(unpaid)} agents released models their log does not pay for; "
                                          f"first: {unpaid[0].detail}")
    over = [agent for agent, spent in run.spends.items() if not within(spent, *run.budget_of(agent))]
    if over:
        epsilon, delta = run.budget_of(over[0])
        return Check(BUDGET_CHECK, False, f"{len(over)} agents overspent, e.g. node {over[0]}: Thm 1 gives "
                                          f"{theorem1_epsilon(run.spends[over[0]], delta):.6g} > its budget "
                                          f"{epsilon:g}")
    largest = max((theorem1_epsilon(spent, run.budget_of(agent)[1]) / run.budget_of(agent)[0]
                   for agent, spent in run.spends.items()), default=0.0)
    read = len(run.spends) - len(run.inferred)
    return Check(BUDGET_CHECK, True, f"{read} agents' logged spends (and {len(run.inferred)} inferred) compose within "
                                     f"their budgets by Thm 1; the fullest uses {largest:.4g} of its budget")


AUDITOR = PersonalizedCDAuditor()  # registered by node.protocols.personalized_cd
