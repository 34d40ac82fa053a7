"""Paths of a token's walk drawn from its transition matrix: walk-sum's planned runs, rw-sgd's ex-ante losses."""

from __future__ import annotations

import numpy as np


def simulate_walks(W: np.ndarray, steps: int, start: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` paths of the Markov chain W, shape (count, steps): paths[:, 0] = start, paths[:, t+1] ~ W[paths[:, t]].

    The walks advance together, one uniform draw per walk and step, so one walk takes the draws of
    `rng.random(steps − 1)`, in order.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    cumulative = np.cumsum(np.asarray(W, dtype=float), axis=1)
    last = len(cumulative) - 1
    paths = np.empty((count, steps), dtype=np.int64)
    paths[:, 0] = start
    draws = rng.random((steps - 1, count))
    for t in range(1, steps):
        rows = cumulative[paths[:, t - 1]]
        paths[:, t] = np.minimum((rows <= draws[t - 1, :, None] * rows[:, -1:]).sum(axis=1), last)
    return paths


def simulate_walk(W: np.ndarray, steps: int, start: int, rng: np.random.Generator) -> np.ndarray:
    """A path of the Markov chain W: path[0] = start, path[t+1] ~ W[path[t]]."""
    return simulate_walks(W, steps, start, 1, rng)[0]
