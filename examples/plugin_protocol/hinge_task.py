"""A linear SVM: the hinge loss max(0, 1 − y⟨θ, x⟩) on labels ±1, with a synthetic dataset of its own.

netdp clips every example's gradient and adds the noise; a task only says what the gradient is.
The hinge's subgradient is −y x on an example inside the margin (y⟨θ, x⟩ < 1) and 0 outside it.
The metric (accuracy of sign⟨θ, x⟩) and the ±1 label check are TaskSpec's defaults for a
classification task.

`wide-margin`: points on the unit sphere labelled by a hidden unit separator w*, keeping only those
at least MARGIN away from its hyperplane, so a linear SVM can separate them with room to spare.
`netdp data split wide-margin --topology t.json` draws it.
"""

from __future__ import annotations

import numpy as np

from node.plugin import FloatArray, RawExamples, TaskPlugin, TaskSpec

TASK_NAME = "hinge"
MARGIN = 0.1


class HingeTask(TaskSpec):
    """The hinge loss of a linear SVM (labels ±1)."""

    def example_gradients(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
        inside = y * (x @ theta) < 1.0
        return np.where(inside, -y, 0.0)[:, None] * x

    def data_loss(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        return float(np.mean(np.maximum(0.0, 1.0 - y * (x @ theta))))


def wide_margin(size: int, dimension: int, rng: np.random.Generator) -> RawExamples:
    """`size` points on the unit sphere at least MARGIN from the hyperplane of a hidden unit separator."""
    separator = rng.normal(size=dimension)
    separator /= np.linalg.norm(separator)
    rows: list[FloatArray] = []
    while sum(len(block) for block in rows) < size:
        block = rng.normal(size=(size, dimension))
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        rows.append(block[np.abs(block @ separator) >= MARGIN])
    x = np.concatenate(rows)[:size]
    return RawExamples(x, np.where(x @ separator >= 0.0, 1.0, -1.0), f"sign of <w*, x>, margin >= {MARGIN:g}")


PLUGIN = TaskPlugin(TASK_NAME, HingeTask(), "linear SVM: hinge loss on labels ±1",
                    datasets={"wide-margin": wide_margin})
