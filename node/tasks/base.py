"""What a learning task is: the parts of a model that the learning protocols and their auditors call.

A task is a linear model θ ∈ R^D read through a loss: its per-example gradients (which the
protocols clip to norm C, so the noise's sensitivity holds whatever the task), its mean loss, the
metric a user reads a model by, what its labels must look like, and optionally datasets that
`netdp data split` can draw from. Everything but the loss and gradient has a default, so a small
task is two methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
LabelKind = Literal["classification", "regression"]


@dataclass(frozen=True)
class RawExamples:
    """A dataset as a loader returns it: raw feature rows, labels ±1 (classification) or targets, a label note.

    `netdp data split` then prepares it like every other source (80/20 split, standardised unit-norm rows,
    regression targets standardised) and partitions it across the nodes.
    """

    x: FloatArray
    y: FloatArray
    labels: str = ""


# A dataset loader: (examples wanted, features wanted, the seeded generator) -> the examples.
DatasetLoader = Callable[[int, int, np.random.Generator], RawExamples]


class TaskSpec(ABC):
    """A learning task's model: what a node computes on its data and what the auditor scores a model by.

    `labels` says what y holds: ±1 labels ("classification", checked when a file is read) or real
    targets ("regression", standardised by `netdp data split`). `metric_name` names `metric` in reports.
    """

    labels: LabelKind = "classification"
    metric_name: str = "accuracy"

    @abstractmethod
    def example_gradients(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
        """∇ℓ(θ; x_i, y_i) for every example (rows), unclipped and unregularised."""

    @abstractmethod
    def data_loss(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        """The mean loss over the examples, without regulariser."""

    def metric(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        """What a user reads a model by: by default the accuracy of sign⟨θ, x⟩ (classification) or the MSE."""
        predictions = x @ theta
        if self.labels == "regression":
            return float(np.mean((predictions - y) ** 2))
        return float(np.mean(np.where(predictions >= 0.0, 1.0, -1.0) == y))

    def label_problem(self, y: FloatArray) -> str | None:
        """Why these labels do not fit the task (None when they do): classification labels are ±1."""
        if self.labels == "classification" and not np.isin(y, (-1.0, 1.0)).all():
            return f"classification labels must be -1 or +1, found {np.setdiff1d(y, (-1.0, 1.0))[0]:g}"
        return None


@dataclass(frozen=True)
class TaskPlugin:
    """What one entry of the `netdp.tasks` group registers: a task's name, model and the datasets it brings.

    `datasets` maps a DATASET name of `netdp data split` to its loader; a name must not clash with a
    built-in source or another task's dataset.
    """

    name: str
    spec: TaskSpec
    description: str
    datasets: Mapping[str, DatasetLoader] = field(default_factory=lambda: MappingProxyType({}))
