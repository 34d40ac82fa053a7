"""Public parameters shared by the protocols that add Gaussian noise to vectors.

Each protocol module defines its own pydantic `Params` (with a `name` literal that the
published topology's `protocol` union dispatches on); the noisy-vector ones extend this.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from node.learning import Adjacency, Task, derived_sensitivity

# Canaries are public in number only: which way each one points is the planting node's secret (node.canaries).
# An ordinary run (0) publishes none, so its topology file and digest are what they were before canaries existed.
CANARIES_DESCRIPTION = ("canary coordinates appended to every vector (an audit run: each node plants one secret "
                        "fair coin per coordinate there, see `netdp run --canaries`); 0 in an ordinary run")


class NoisyVectorParams(BaseModel):
    """What every noisy-averaging protocol publishes: noise, sensitivity, order, dimension."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: float = Field(ge=0.0, description="std of the Gaussian noise each node adds once")
    sensitivity: float = Field(gt=0.0, description="l2 sensitivity; inputs are clipped to norm sensitivity/2")
    alpha: float = Field(gt=1.0, description="Renyi order used in reports")
    dimension: int = Field(ge=1, description="length D of every node's vector")
    canaries: int = Field(0, ge=0, description=CANARIES_DESCRIPTION, exclude_if=lambda count: count == 0)

    @property
    def vector_length(self) -> int:
        """Length of every vector the protocol sends: the D data coordinates, then the canary coordinates."""
        return self.dimension + self.canaries


class LearningParams(NoisyVectorParams):
    """What the learning protocols publish: a noisy clipped gradient step on each node's own data."""

    sigma: float = Field(ge=0.0, description="std of the Gaussian noise added to every gradient step")
    sensitivity: float = Field(gt=0.0, description="Δ: bound on the change of one node's step gradient "
                                                   "between adjacent datasets")
    dimension: int = Field(ge=1, description="number of features D (the model's length)")
    task: Task = Field(description="the local loss: a registered learning task (logistic: labels ±1; "
                                  "least_squares: real targets)")
    learning_rate: float = Field(gt=0.0, description="step size η")
    clip: float = Field(gt=0.0, description="per-example gradient norm bound C")
    batch: int | None = Field(None, ge=1, description="minibatch size b (SGD); none: the whole local set (GD)")
    adjacency: Adjacency = Field("example", description="neighbouring datasets: one example replaced, or all")
    regularization: float = Field(0.0, ge=0.0, description="L2 regularisation λ")

    @model_validator(mode="after")
    def _sensitivity_covers_the_clip(self) -> LearningParams:
        if self.batch is not None or self.adjacency == "dataset":
            derived = derived_sensitivity(self.clip, self.adjacency, self.batch)
            if self.sensitivity < derived * (1 - 1e-12):
                raise ValueError(f"sensitivity {self.sensitivity:g} is below {derived:g}, the bound that clip "
                                 f"{self.clip:g} gives with {self.adjacency} adjacency: the noise would not cover it")
        return self
