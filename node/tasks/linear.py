"""netdp's own learning tasks, registered in the `netdp.tasks` group like any other package's.

logistic: logistic regression on ±1 labels, read by accuracy. least_squares: ½(⟨θ, x⟩ − y)² on
real targets, read by mean squared error. recommendation: the AISTATS 2018 recommendation task's
model (least squares on movie features, `netdp data recommendation` makes its data), read by the
per-user RMSE the paper reports.
"""

from __future__ import annotations

import numpy as np

from node.tasks.base import FloatArray, TaskPlugin, TaskSpec


class LogisticTask(TaskSpec):
    """log(1 + exp(−y⟨θ, x⟩)) on labels ±1."""

    def example_gradients(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
        # gradient −y x σ(−y⟨θ, x⟩), computed without overflow
        return (-y * _sigmoid(-y * (x @ theta)))[:, None] * x

    def data_loss(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        return float(np.mean(np.logaddexp(0.0, -y * (x @ theta))))


class LeastSquaresTask(TaskSpec):
    """½(⟨θ, x⟩ − y)² on real targets."""

    labels = "regression"
    metric_name = "mse"

    def example_gradients(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
        return ((x @ theta) - y)[:, None] * x

    def data_loss(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        return 0.5 * float(np.mean(((x @ theta) - y) ** 2))


class RecommendationTask(LeastSquaresTask):
    """Least squares on (φ_j, r_ij − r̄_i), read by the root of the mean squared rating error."""

    metric_name = "rmse"

    def metric(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        return float(np.sqrt(super().metric(theta, x, y)))


def _sigmoid(z: FloatArray) -> FloatArray:
    return np.exp(-np.logaddexp(0.0, -z))


LOGISTIC = TaskPlugin("logistic", LogisticTask(), "logistic regression (labels ±1)")
LEAST_SQUARES = TaskPlugin("least_squares", LeastSquaresTask(), "least squares (real targets)")
RECOMMENDATION = TaskPlugin("recommendation", RecommendationTask(),
                            "least squares on movie features, scored by RMSE (netdp data recommendation)")
