"""Public parameters shared by the protocols that add Gaussian noise to vectors.

Each protocol module defines its own pydantic `Params` (with a `name` literal that the
published topology's `protocol` union dispatches on); the noisy-vector ones extend this.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class NoisyVectorParams(BaseModel):
    """What every noisy-averaging protocol publishes: noise, sensitivity, order, dimension."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: float = Field(ge=0.0, description="std of the Gaussian noise each node adds once")
    sensitivity: float = Field(gt=0.0, description="l2 sensitivity; inputs are clipped to norm sensitivity/2")
    alpha: float = Field(gt=1.0, description="Renyi order used in reports")
    dimension: int = Field(ge=1, description="length D of every node's vector")
