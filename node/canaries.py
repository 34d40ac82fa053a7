"""Canaries: secret fair coins a node plants in its own contributions, so that an audit tests the real run.

An audit run publishes a number M of canary coordinates (`canaries` in the protocol's
parameters, set by `netdp run --canaries M`): every vector the protocol sends is the D data
coordinates followed by M canary coordinates. Each node draws M fair signs s_i from its own
coin source once, logs them to its private log only, and every contribution it makes (its
clipped input, or each step's clipped gradient) carries magnitude · s_i in canary coordinate i,
magnitude = Δ/2, half the sensitivity the contribution is clipped to. Flipping one sign moves the
contribution by exactly Δ in one coordinate: one adjacent change of the node's data, which is
what the one-run audit of Steinke, Nasr & Jagielski (NeurIPS 2023) needs. The data coordinates
are the run's own, untouched; the canary coordinates carry nothing but canaries and the real
noise, so the run is otherwise ordinary: real sampler, real messages, real logs.

Nothing here knows a protocol: a protocol hands its clipped contribution to
`ProtocolContext.contribution`, which appends the canaries and logs what really went in. A node
restarted on its logs (`--resume`) plants the signs its private log holds, never fresh ones: a
canary whose sign changed mid-run would be no canary at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from node.codec import from_tensor
from node.noise import FairCoins
from node.viewlog import LogContents


@dataclass(frozen=True)
class Canaries:
    """One node's canary signs (empty in an ordinary run)."""

    signs: np.ndarray
    logged: bool = False  # already in the node's private log (read back at a restart): not logged again

    @classmethod
    def drawn(cls, count: int, coins: FairCoins) -> Canaries:
        """`count` fresh fair signs from the node's own coin source."""
        return cls(coins.flip(count))

    @classmethod
    def recalled(cls, private: LogContents) -> Canaries | None:
        """The signs a restarted node's private log holds; None when it logged none (it planted nothing yet)."""
        records = private.of_kind("canaries")
        return cls(from_tensor(records[0].signs), logged=True) if records else None

    @property
    def count(self) -> int:
        return int(self.signs.size)

    def planted(self, contribution: np.ndarray, sensitivity: float) -> np.ndarray:
        """The contribution followed by its canary coordinates, (sensitivity / 2) · sign each."""
        return np.concatenate([np.asarray(contribution, dtype=np.float64), canary_magnitude(sensitivity) * self.signs])


def canary_magnitude(sensitivity: float) -> float:
    """What one canary coordinate carries, unsigned: half the sensitivity, so a flipped sign moves it by Δ."""
    return sensitivity / 2.0
