"""What a personalized-CD run bought with its privacy: mean test accuracy against purely local and non-private CD.

Every agent is scored on its own held-out set (test.npz, rows by agent) by its task's metric: its
accuracy (logistic task) or its RMSE (least squares, the recommendation task: the paper's per-user
test RMSE). The
means are over the agents that logged an output (a node that died has none), for all three:
* run: the agents' final models as they logged them (`private` when the run was private);
* local: every agent's own minimiser of L_i, no communication (`simulate.local_model`);
* non_private: CD without noise, the same T_i updates per agent, simulated from the training
  files in a seeded random wake-up order (`simulate.simulate_cd`);
* budget_curve: private CD simulated the same way at several budgets ε̄ (the run's δ̄ and T_i),
  REPEATS runs each: the metric against the privacy budget (the paper's Fig. 2 style).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from coordinator_tools.audit.protocols.personalized_cd.simulate import accuracies, local_model, simulate_cd
from coordinator_tools.dataprep.personalized_task import load_test_sets
from node.budget import equal_split
from node.data import node_data_file
from node.personalized import AgentProblem
from node.protocols.personalized_cd import PersonalizedCDParams, load_agent_data
from node.tasks.registry import task_spec
from node.topology import Topology

BASELINE_SEED = 0
CURVE_BUDGETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
REPEATS = 3


def agent_problems(topology: Topology, data_dir: Path) -> list[AgentProblem]:
    """Every agent's problem from its training file in the data folder."""
    params: PersonalizedCDParams = topology.protocol
    return [AgentProblem.of(params, topology, agent, load_agent_data(node_data_file(data_dir, agent), params))
            for agent in range(topology.n)]


def utility_report(topology: Topology, outputs: Mapping[int, np.ndarray], data_dir: Path) -> dict[str, object]:
    """The report's `utility` block."""
    params: PersonalizedCDParams = topology.protocol
    problems = agent_problems(topology, data_dir)
    tests = load_test_sets(data_dir, params.dimension, params.task)
    scored = sorted(outputs)
    rng = np.random.default_rng(BASELINE_SEED)

    spec = task_spec(params.task)
    per_user_rmse = spec.metric_name == "mse"  # the paper's per-user test RMSE: the root of each agent's MSE

    def mean(models: np.ndarray) -> float:  # over the agents scored (an agent without an output has zeros here)
        scores = accuracies(models[scored], [tests[agent] for agent in scored], params.task)
        return float((np.sqrt(scores) if per_user_rmse else scores).mean())

    # an audit run's outputs end with canary coordinates: the model is the p data coordinates
    run = mean(np.array([outputs.get(agent, np.zeros(params.dimension))[: params.dimension]
                         for agent in range(topology.n)]))
    return {
        "metric": "rmse" if per_user_rmse else spec.metric_name,
        "agents_scored": scored,
        "test_examples": int(sum(len(tests[agent].y) for agent in scored)),
        "run": run,
        "private": run if params.private else None,
        "local": mean(np.array([local_model(problem) for problem in problems])),
        "non_private": mean(simulate_cd(problems, params.updates, None, rng)),
        "budget_curve": _budget_curve(params, problems, mean, rng),
        "baselines": f"local: each agent's minimiser of L_i; non_private and budget_curve: CD simulated from the "
                     f"training files, seed {BASELINE_SEED}",
    }


def _budget_curve(params: PersonalizedCDParams, problems: list[AgentProblem], mean: Callable[[np.ndarray], float],
                  rng: np.random.Generator) -> dict[str, object]:
    """The mean test metric of simulated private CD at every budget of CURVE_BUDGETS (and the run's, if private)."""
    budgets = sorted({*CURVE_BUDGETS, *([params.epsilon] if params.private else [])})
    accuracy = []
    for budget in budgets:
        steps = [equal_split(budget, params.delta, params.updates)] * len(problems)
        accuracy.append(float(np.mean([mean(simulate_cd(problems, params.updates, steps, rng))
                                       for _ in range(REPEATS)])))
    return {"epsilon": budgets, "delta": params.delta, "updates": params.updates, "repeats": REPEATS,
            "private": accuracy, "run_epsilon": params.epsilon}
