"""What the token summations share (PAbD Alg. 1 on a ring, Alg. 3 on the complete graph).

One token τ, a vector, walks from holder to holder; custody is the token slot's
(`node.mailboxes.token_slot`). Its hop counts the contributions already in it: the holder
of hop h adds the (h + 1)-th, its clipped input x_u (the ball of radius Δ/2, as in the
averaging protocols) plus Gaussian noise from the node's own sampler when the protocol's
rule asks for it, then hands τ on. So everything a rule needs is the public hop: the token
carries no state beside its value.

Nodes share no clock, so every wait of a run is bounded by one deadline, counted from the
node's own start: the startup deadline, then one round deadline per hop the run makes. A
node that cannot pass the token on, or that waits for a token or result that does not come,
gives up then with a one-line reason (`TokenWalkError`, exit code 2).

A node's local step k (where `netdp run --kill NODE@k` strikes) starts when it has passed the
token on to another node for the k-th time (step 0 as it starts): a node killed there holds no
token, whatever visits it kept for itself on the way.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from node.data import clip_to_ball
from node.errors import NetdpError
from node.protocols.params import NoisyVectorParams

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.topology import NetworkParams

TOKEN = "token"  # the kind of the summation token's messages
SUM_TOKEN_ID = "sum"
NOISE_PURPOSE = "perturb"  # Perturb(x_u^k; σ) of the paper; the draw's step is the node's visit index k


class TokenSumParams(NoisyVectorParams):
    """What both summations publish beside their walk: σ_loc, Δ, the Rényi order and D."""

    sigma: float = Field(ge=0.0, description="σ_loc: std of the Gaussian noise of one noisy contribution")
    sensitivity: float = Field(gt=0.0, description="l2 sensitivity Δ; every contribution is clipped to norm Δ/2")

    @abstractmethod
    def hops(self, n: int) -> int:
        """Hand-overs of the whole run on n nodes (the result's included): what its deadlines are counted in."""

    @abstractmethod
    def noise_sigmas(self, n: int) -> list[float]:
        """The std of every noisy contribution of a run on n nodes, in walk order."""

    def sum_noise_std(self, n: int) -> float:
        """Std of the noise in the final sum (per coordinate): the draws are independent."""
        return math.sqrt(sum(sigma**2 for sigma in self.noise_sigmas(n)))

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """Twice the round deadlines a run's node allows its hops (the launcher adds the startup deadline)."""
        return 2 * self.hops(n) * network.round_deadline_s


class TokenWalkError(NetdpError):
    """The walk cannot go on from this node (a next hop never took the token, or nothing came in time)."""


class Deadline:
    """The run's deadline as this node's clock sees it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    @classmethod
    def for_run(cls, params: TokenSumParams, network: NetworkParams, n: int) -> Deadline:
        """From now, as the node starts: the startup deadline, then a round deadline per hop of the run."""
        return cls(network.startup_deadline_s + params.hops(n) * network.round_deadline_s)

    def remaining(self) -> float:
        return max(0.0, self._at - time.monotonic())


class Contributor:
    """A node's contributions to the token: its clipped input, plus noise when the protocol's rule says so."""

    def __init__(self, context: ProtocolContext, value: np.ndarray) -> None:
        self._context = context
        self._input, self._clipped = clip_to_ball(value, context.params.sensitivity / 2.0)

    async def add(self, token: np.ndarray, sigma: float | None, visit: int) -> np.ndarray:
        """τ + x_u (+ N(0, σ² I) unless `sigma` is None); the input and the draw go to the private log."""
        context = self._context
        await context.private_input(self._input, self._clipped)
        if sigma is None:
            return token + self._input
        return token + await context.noise.gaussian(self._input, sigma, step=visit, purpose=NOISE_PURPOSE)
