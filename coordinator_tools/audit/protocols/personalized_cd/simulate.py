"""Personalized CD run centrally, in a random wake-up order: the baselines a real run is compared with.

* local: every agent's own minimiser of L_i, without any communication (perfectly private);
* simulated CD: every agent makes its T_i updates (6) in a uniformly random interleaving (what
  i.i.d. Poisson clocks of one rate give), from the public zero models, each using its
  neighbours' latest models, with Laplace noise at the scale a node uses for its per-step ε
  (private) or none (non-private). Seeded: an experiment, reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize

from node.learning import LocalData, Task, clipped_gradient, metric
from node.personalized import AgentProblem


def local_model(problem: AgentProblem) -> np.ndarray:
    """argmin L_i: the agent's purely local model (L-BFGS on the unclipped loss)."""

    def gradient(theta: np.ndarray) -> np.ndarray:
        return clipped_gradient(problem.task, theta, problem.data.x, problem.data.y, clip=np.inf,
                                regularization=2.0 * problem.regularization).value

    start = np.zeros(problem.data.x.shape[1])
    return minimize(problem.local_loss, start, jac=gradient, method="L-BFGS-B").x


def simulate_cd(problems: Sequence[AgentProblem], updates: int, step_epsilons: Sequence[float] | None,
                rng: np.random.Generator) -> np.ndarray:
    """Every agent's model after T_i updates each in a random order; noise when `step_epsilons` are given."""
    models = np.zeros((len(problems), problems[0].data.x.shape[1]))
    for agent in rng.permutation(np.repeat(np.arange(len(problems)), updates)):
        problem = problems[agent]
        gradient, _ = problem.gradient(models[agent])
        if step_epsilons is not None:
            gradient = gradient + rng.laplace(0.0, problem.sensitivity / step_epsilons[agent], gradient.shape)
        models[agent] = problem.update(models[agent], {peer: models[peer] for peer in problem.weights}, gradient)
    return models


def accuracies(models: np.ndarray | Sequence[np.ndarray], tests: Sequence[LocalData], task: Task) -> np.ndarray:
    """Each agent's test metric (accuracy for classification) of its own model on its own test set."""
    return np.array([metric(task, model, test.x, test.y) for model, test in zip(models, tests)])
