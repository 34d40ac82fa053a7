"""Local losses of the learning protocols: per-example gradients, clipped, averaged.

A node's step gradient is the mean of its examples' gradients, each clipped to norm C
first, so that replacing one of b examples moves it by at most 2C/b and replacing the
whole local dataset by at most 2C: the sensitivity the noise is calibrated to. The L2
regulariser's gradient λθ depends on no data and is added after clipping. Labels are
±1 for classification (logistic loss) and real targets for least squares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from node import data
from node.errors import ConfigError

Task = Literal["logistic", "least_squares"]
Adjacency = Literal["example", "dataset"]


def derived_sensitivity(clip: float, adjacency: Adjacency, batch: int | None) -> float:
    """Δ of one step's gradient: 2C/b when one of b averaged examples is replaced, 2C for a whole dataset.

    Full-batch GD with replace-one adjacency depends on each node's local size, which the
    published parameters do not know: that case needs an explicit Δ (or a minibatch size).
    """
    if adjacency == "dataset":
        return 2.0 * clip
    if batch is None:
        raise ValueError("replace-one adjacency with full-batch gradients needs --sensitivity or --batch")
    return 2.0 * clip / batch


@dataclass(frozen=True)
class LocalData:
    """A node's training examples (rows of x) and labels or targets y."""

    x: np.ndarray
    y: np.ndarray

    def batch(self, step: int, size: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Step `step`'s examples: all of them, or the next `size` in cyclic order."""
        if size is None:
            return self.x, self.y
        rows = (step * size + np.arange(size)) % len(self.y)
        return self.x[rows], self.y[rows]


def load_local_data(path: Path, params: Any) -> LocalData:
    """The node's training share, checked against the published dimension and batch size."""
    x, y = data.load_learning_data(path, params.dimension, task=params.task)
    if params.batch is not None and params.batch > len(y):
        raise ConfigError(f"{path}: {len(y)} examples, fewer than the minibatch size {params.batch}")
    return LocalData(x, y)


@dataclass(frozen=True)
class StepGradient:
    """One step's gradient and how many of its examples were clipped."""

    value: np.ndarray
    clipped: int


def example_gradients(task: Task, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """∇ℓ(θ; x_i, y_i) for every example (rows), unclipped and unregularised."""
    margins = x @ theta
    gradients: np.ndarray
    if task == "least_squares":
        gradients = (margins - y)[:, None] * x
    else:  # logistic loss log(1 + exp(−y⟨θ, x⟩)): gradient −y x σ(−y⟨θ, x⟩), computed without overflow
        gradients = (-y * _sigmoid(-y * margins))[:, None] * x
    return gradients


def clipped_gradient(task: Task, theta: np.ndarray, x: np.ndarray, y: np.ndarray, *, clip: float,
                     regularization: float = 0.0, norm: Literal[1, 2] = 2) -> StepGradient:
    """Mean of the per-example gradients clipped to `norm`-norm `clip`, plus the regulariser's λθ.

    l2 suits Gaussian noise; Laplace noise is calibrated to an l1 bound (personalized learning).
    """
    gradients = example_gradients(task, theta, x, y)
    norms = np.linalg.norm(gradients, ord=norm, axis=1)
    scale = np.minimum(1.0, clip / np.maximum(norms, np.finfo(float).tiny))
    mean = (gradients * scale[:, None]).mean(axis=0)
    return StepGradient(mean + regularization * theta, int(np.count_nonzero(norms > clip)))


def loss(task: Task, theta: np.ndarray, x: np.ndarray, y: np.ndarray, regularization: float = 0.0) -> float:
    """The mean loss over the examples, with the L2 term λ‖θ‖²/2."""
    margins = x @ theta
    if task == "least_squares":
        data = 0.5 * float(np.mean((margins - y) ** 2))
    else:
        data = float(np.mean(np.logaddexp(0.0, -y * margins)))
    return data + 0.5 * regularization * float(theta @ theta)


def metric(task: Task, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """What a user reads a model by: accuracy for classification, mean squared error for regression."""
    predictions = x @ theta
    if task == "least_squares":
        return float(np.mean((predictions - y) ** 2))
    return float(np.mean(np.where(predictions >= 0.0, 1.0, -1.0) == y))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    sigmoid: np.ndarray = np.exp(-np.logaddexp(0.0, -z))
    return sigmoid
