"""Graph-regularized personal models (AISTATS 2018 Sec. 2–3): one agent's problem, update (6), objective (2).

Agent i learns its own Θ_i by block coordinate descent on

  Q(Θ) = ½ Σ_{i<j} W_ij ‖Θ_i − Θ_j‖² + μ Σ_i D_ii c_i L_i(Θ_i),   L_i(θ) = (1/m_i) Σ ℓ(θ; x, y) + λ_i ‖θ‖²,

with D_ii = Σ_j W_ij and confidence c_i = min(1, m_i / m_max) (the paper's m_i / max_j m_j, with
the largest size a published bound). Its step (6) is

  Θ_i ← (1 − α_i) Θ_i + α_i (Σ_j (W_ij / D_ii) Θ_j − μ c_i (∇L_i(Θ_i) + η)),   α_i = 1 / (1 + μ c_i L_i^loc),

where η is the Laplace noise of the private variant (zero otherwise). The step uses W only
through W_ij / D_ii, and scaling W scales Q, so a topology may publish the similarities scaled to
rows summing to at most 1 without changing the algorithm or its minimiser. Every example's loss
gradient is clipped to l1 norm L₀, so replacing one example moves ∇L_i by at most 2L₀/m_i in l1
(Lemma 1), which the Laplace scale s = 2L₀ / (ε m_i) covers. λ_i is 1/m_i unless published; the
smoothness bound L_i^loc is the published bound on the data term plus 2λ_i.

The private warm start (Remark 3, supplementary Sec. C) releases the agent's purely local model,
the minimiser of L_i with the same clipped gradients, perturbed by output perturbation (Chaudhuri
et al. 2011): clipping a logistic or least-squares example's gradient rescales the derivative of
its loss along ⟨θ, x⟩ monotonically, so that L_i stays convex, 2λ_i-strongly convex with λ_i‖θ‖²,
and its minimiser moves by at most L₀ / (m_i λ_i) in l2 when one example is replaced. Model
propagation (supplementary Sec. C) then smooths the released local models over the graph by block
coordinate descent on

  Q_MP(Θ) = ½ (Σ_{i<j} W_ij ‖Θ_i − Θ_j‖² + μ Σ_i D_ii c_i ‖Θ_i − Θ_i^loc‖²)   (15),

objective (2) with L_i(θ) = ½ ‖θ − Θ_i^loc‖², whose block minimiser is step (16).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from node.learning import LocalData, Task, clipped_gradient, loss

if TYPE_CHECKING:
    from node.topology import Topology

# The local model is computed until its gradient's l2 norm is at most this share of L₀ / m_i; its
# distance to the exact minimiser, at most that over 2λ_i, is part of the warm start's sensitivity.
LOCAL_MODEL_TOLERANCE = 1e-6
LOCAL_MODEL_ITERATIONS = 100_000


@dataclass(frozen=True)
class AgentProblem:
    """What agent i needs for its update: its data, its constants and its neighbours' normalised weights."""

    data: LocalData
    task: Task
    mu: float
    lipschitz: float  # L₀: the l1 bound every example's loss gradient is clipped to
    confidence: float  # c_i
    regularization: float  # λ_i of the paper's λ_i ‖θ‖²
    step: float  # α_i
    weights: Mapping[int, float]  # W_ij / D_ii of every neighbour j
    smoothness: float  # L_i^loc: the published bound on the data term's smoothness plus 2λ_i

    @classmethod
    def of(cls, params: Any, topology: Topology, node: int, data: LocalData) -> AgentProblem:
        """Agent `node`'s problem under the published parameters and graph."""
        examples = len(data.y)
        regularization = 1.0 / examples if params.regularization is None else params.regularization
        confidence = min(1.0, examples / params.max_examples)
        smoothness = params.smoothness + 2.0 * regularization
        row = {peer: weight for peer, weight in topology.weight_row(node).items() if peer != node}
        degree = sum(row.values())
        return cls(data, params.task, params.mu, params.lipschitz, confidence, regularization,
                   1.0 / (1.0 + params.mu * confidence * smoothness),
                   {peer: weight / degree for peer, weight in row.items()}, smoothness)

    @classmethod
    def sized(cls, params: Any, topology: Topology, node: int, examples: int) -> AgentProblem:
        """Agent `node`'s problem as far as its size m_i fixes it, with m_i placeholder examples (zeros): update (6)'s
        coefficients and the sensitivities, which is all an auditor who knows m_i but none of the data can use."""
        return cls.of(params, topology, node, LocalData(np.zeros((examples, params.dimension)), np.zeros(examples)))

    @property
    def examples(self) -> int:
        """m_i."""
        return len(self.data.y)

    @property
    def sensitivity(self) -> float:
        """l1 sensitivity of ∇L_i when one example is replaced (Lemma 1): 2L₀ / m_i."""
        return 2.0 * self.lipschitz / self.examples

    @property
    def warm_start_sensitivity(self) -> float:
        """l1 sensitivity of `local_model`: √p (1 + tolerance) L₀ / (m_i λ_i).

        The exact minimiser moves by at most L₀ / (m_i λ_i) in l2 (one example moves ∇L_i by 2L₀/m_i,
        L_i is 2λ_i-strongly convex), each computed one is within tolerance · L₀ / (2 m_i λ_i) of its
        own, and l1 ≤ √p l2.
        """
        l2 = (1.0 + LOCAL_MODEL_TOLERANCE) * self.lipschitz / (self.examples * self.regularization)
        return math.sqrt(self.data.x.shape[1]) * l2

    def local_model(self) -> np.ndarray:
        """argmin L_i with clipped example gradients, by accelerated gradient descent to the tolerance.

        Raises ValueError when it does not get there (λ_i = 0, or data beyond the published smoothness).
        """
        if not self.regularization > 0.0:
            raise ValueError("a private local model needs lambda_i > 0: its sensitivity is L0 / (m_i lambda_i)")
        root = math.sqrt(self.smoothness / (2.0 * self.regularization))  # √κ of the strongly convex L_i
        momentum = (root - 1.0) / (root + 1.0)
        tolerance = LOCAL_MODEL_TOLERANCE * self.lipschitz / self.examples
        point = previous = np.zeros(self.data.x.shape[1])
        for _ in range(LOCAL_MODEL_ITERATIONS):
            gradient, _ = self.gradient(point)
            if np.linalg.norm(gradient) <= tolerance:
                return point
            current = point - gradient / self.smoothness
            point, previous = current + momentum * (current - previous), current
        raise ValueError(f"the local model did not reach its tolerance in {LOCAL_MODEL_ITERATIONS} steps: are the "
                         "examples beyond the published smoothness bound?")

    def gradient(self, theta: np.ndarray, clip: float | None = None) -> tuple[np.ndarray, int]:
        """∇L_i(θ) with every example's gradient clipped to l1 norm `clip` (L₀ unless the agent deliberately skips
        clipping, `node.breaks`); and how many were clipped."""
        step = clipped_gradient(self.task, theta, self.data.x, self.data.y,
                                clip=self.lipschitz if clip is None else clip,
                                regularization=2.0 * self.regularization, norm=1)
        return step.value, step.clipped

    def update(self, theta: np.ndarray, neighbours: Mapping[int, np.ndarray], gradient: np.ndarray) -> np.ndarray:
        """Update (6) from the agent's model, its neighbours' latest ones and its (noisy) gradient."""
        smoothed = sum(weight * neighbours[peer] for peer, weight in self.weights.items())
        return (1.0 - self.step) * theta + self.step * (smoothed - self.mu * self.confidence * gradient)

    def propagate(self, local: np.ndarray, neighbours: Mapping[int, np.ndarray]) -> np.ndarray:
        """Model propagation's step (16): the exact minimiser of objective (15) in Θ_i given the neighbours' models,
        (Σ_j (W_ij / D_ii) Θ_j + μ c_i Θ_i^loc) / (1 + μ c_i), with `local` the agent's released (noisy) local
        model; it reads neither Θ_i nor the data."""
        smoothed = sum(weight * neighbours[peer] for peer, weight in self.weights.items())
        pull = self.mu * self.confidence
        return (smoothed + pull * local) / (1.0 + pull)

    def local_loss(self, theta: np.ndarray) -> float:
        """L_i(θ), the paper's regulariser included."""
        return loss(self.task, theta, self.data.x, self.data.y, regularization=2.0 * self.regularization)


def objective(problems: Sequence[AgentProblem], topology: Topology, models: np.ndarray) -> float:
    """Q(Θ) of (2) on the published weights, models[i] = Θ_i (scaled weights scale Q: compare within a run)."""
    smoothness = 0.5 * sum(weight * float(np.sum((models[u] - models[v]) ** 2))
                           for (u, v), weight in topology.edge_weights.items() if u < v)
    degrees = [1.0 - topology.weight_row(node)[node] for node in range(topology.n)]
    fit = sum(problem.mu * degree * problem.confidence * problem.local_loss(model)
              for problem, degree, model in zip(problems, degrees, models))
    return smoothness + fit
