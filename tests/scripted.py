"""What chance and faults do to an in-process run, scripted so that a test knows it beforehand.

A walk's next holders come from the OS CSPRNG (`node.protocols.token_sum._PATH_DRAWS`), which a
test replaces by `ScriptedPath`. An in-process node cannot be SIGKILLed, so the tests raise `Crash`
where its process would die (`DiesDrawing`): whatever the node would have logged from there on is
never written, as after a kill (what it logged before is durable either way).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from node.noise import GaussianSampler, LaplaceSampler


class ScriptedPath:
    """Stands in for the walk's CSPRNG: every next holder from a planned path of holders, hop 0 first."""

    def __init__(self, holders: Sequence[int]) -> None:
        self._next = iter(holders[1:])

    def choices(self, candidates: Sequence[int], weights: Sequence[float]) -> list[int]:
        holder = next(self._next)
        assert holder in candidates
        return [holder]


class Crash(Exception):
    """The node's process dies here."""


class DiesDrawing:
    """A node's Gaussian or Laplace sampler that dies as it makes its draw number `at` (from 0), before the draw
    is logged; until then it draws as `sampler` does."""

    def __init__(self, sampler: GaussianSampler | LaplaceSampler, at: int = 0) -> None:
        self._sampler = sampler
        self._at = at
        self._draws = itertools.count()
        self.kind = sampler.kind

    def perturb(self, value: np.ndarray, scale: float) -> np.ndarray:
        if next(self._draws) == self._at:
            raise Crash
        return self._sampler.perturb(value, scale)

    def effective_sensitivity(self, sensitivity: float, scale: float) -> float:
        return self._sampler.effective_sensitivity(sensitivity, scale)
