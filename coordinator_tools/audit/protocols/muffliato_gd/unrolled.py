"""A Muffliato-GD/SGD run (Alg. 3) unrolled in time: every message's row on every gradient and noise draw.

Step t: θ_v^{t,0} = θ_v^t − η_t (g_v^t + z_v^t), then K rounds θ^{t,k+1} = W_{t,k} θ^{t,k}, and
θ^{t+1} = θ^{t,K}; θ^0 = 0 is public. Message (t, k, w) is θ_w^{t,k}, k = 0..K−1 (Muffliato sends
the values it then mixes). Each clipped gradient g_u^s is an input column and each noise draw
z_u^s (std σ) its own noise column, never merged (the matrix-factorization view of
20-accounting.md); z_u^s enters wherever g_u^s does, so one row serves both (A = B). Column
(u, s) is u·T + s: a node's T columns are contiguous.

The realized schedule is the input: per round the linear map the nodes really applied (drop-outs
folded into the self-loop) and who received whose model. Chebyshev rounds are not a map of
θ^{t,k} alone (they need the realized affine rows) and are out of scope here.

A constant step size cancels (it scales each gradient together with its own noise); a varying
one does not (it reweights the steps against each other), so it is an input.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.core import LinearGaussianModel

Message = tuple[int, int, int]  # (step t, round k, sender w): the model θ_w^{t,k}


@dataclass(frozen=True)
class Schedule:
    """What really happened in a learning run, round by round.

    ``mixing[t][k]`` (n×n): θ^{t,k+1} = mixing[t][k] θ^{t,k}, row v the weights v really used.
    ``received[t][k][v]``: the senders w whose θ_w^{t,k} node v received (used or not).
    """

    n: int
    mixing: tuple[tuple[np.ndarray, ...], ...]
    received: tuple[tuple[tuple[frozenset[int], ...], ...], ...]

    def __post_init__(self) -> None:
        if not self.mixing:
            raise ValueError("a learning run has at least one step")
        if len(self.received) != len(self.mixing) or any(
            len(views) != len(maps) for views, maps in zip(self.received, self.mixing)
        ):
            raise ValueError("every step needs as many reception lists as mixing maps")
        if any(np.shape(w) != (self.n, self.n) for maps in self.mixing for w in maps):
            raise ValueError(f"every mixing map must be {self.n}×{self.n}")
        for views in self.received:
            for senders in views:
                if len(senders) != self.n:
                    raise ValueError(f"a round needs the senders of each of the {self.n} nodes")
                if any(v in heard or not heard <= set(range(self.n)) for v, heard in enumerate(senders)):
                    raise ValueError("a node can only receive the models of other nodes of the run")

    @property
    def steps(self) -> int:
        """T, the number of gradient steps."""
        return len(self.mixing)


def fixed_schedule(weights: np.ndarray, *, steps: int, rounds: int) -> Schedule:
    """The plan on a fixed graph: every round mixes with `weights`; v hears every w with weights[v, w] ≠ 0."""
    n = weights.shape[0]
    heard = tuple(frozenset(np.flatnonzero(weights[v]).tolist()) - {v} for v in range(n))
    return Schedule(n=n, mixing=((weights,) * rounds,) * steps, received=((heard,) * rounds,) * steps)


def coefficients(
    schedule: Schedule, step_sizes: Sequence[float] | None = None
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(t, k, C) for every round: C[w, u, s] is the coefficient of g_u^s (and of z_u^s) in θ_w^{t,k}.

    Streams one round at a time; each C is a fresh array. Step sizes default to 1 (any constant).
    """
    n, steps = schedule.n, schedule.steps
    eta = np.ones(steps) if step_sizes is None else np.asarray(step_sizes, dtype=float)
    if eta.shape != (steps,):
        raise ValueError(f"need one step size per step, {steps}, got {eta.shape}")
    current = np.zeros((n, n, steps))
    nodes = np.arange(n)
    for t, maps in enumerate(schedule.mixing):
        current = current.copy()
        current[nodes, nodes, t] -= eta[t]
        for k, mixing in enumerate(maps):
            yield t, k, current
            current = (mixing @ current.reshape(n, n * steps)).reshape(n, n, steps)


@dataclass(frozen=True)
class UnrolledRun:
    """One row per message some node received, on the n·T columns (u, s) of g_u^s and z_u^s alike."""

    n: int
    steps: int
    rows: np.ndarray  # (m, n·T)
    messages: tuple[Message, ...]  # what each row is, sorted by (t, k, w)
    received: tuple[tuple[int, ...], ...]  # per node v: the rows in v's view, ascending

    def column(self, node: int, step: int) -> int:
        """The column of g_node^step (and z_node^step)."""
        return node * self.steps + step

    def linear_model(self, directions: np.ndarray | None = None) -> LinearGaussianModel:
        """The run as the core's model of one change per node, for `exact` and `attack`.

        Node u's input x_u moves g_u^s by directions[u, s]·x_u (all ones if None: the same shift
        at every step); every draw z_u^s is a noise column owned by u. Its p_{u→v} is dᵀX d for
        d = directions[u], X as in `sensitivity`; with T = 1 it is the one-draw-per-input model.
        """
        shape = (self.n, self.steps)
        weights = np.ones(shape) if directions is None else np.asarray(directions, dtype=float)
        if weights.shape != shape:
            raise ValueError(f"need directions of shape {shape}, got {weights.shape}")
        inputs = np.einsum("mus,us->mu", self.rows.reshape(-1, *shape), weights)
        owners = tuple(np.repeat(np.arange(self.n), self.steps).tolist())
        return LinearGaussianModel(n=self.n, inputs=inputs, received=self.received, noise=self.rows, noise_owner=owners)


def unroll(schedule: Schedule, step_sizes: Sequence[float] | None = None) -> UnrolledRun:
    """The rows of every model some node received, from the realized schedule."""
    n = schedule.n
    rows: list[np.ndarray] = []
    messages: list[Message] = []
    for t, k, current in coefficients(schedule, step_sizes):
        senders = sorted(set().union(*schedule.received[t][k]))
        messages.extend((t, k, w) for w in senders)
        rows.append(current[senders].reshape(len(senders), n * schedule.steps))
    index = {message: i for i, message in enumerate(messages)}
    received = tuple(
        tuple(index[t, k, w] for t, views in enumerate(schedule.received)
              for k, senders in enumerate(views) for w in sorted(senders[v]))
        for v in range(n)
    )  # fmt: skip
    table = np.vstack(rows) if rows else np.zeros((0, n * schedule.steps))
    return UnrolledRun(n=n, steps=schedule.steps, rows=table, messages=tuple(messages), received=received)
