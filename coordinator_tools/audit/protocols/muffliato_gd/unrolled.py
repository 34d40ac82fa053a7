"""A Muffliato-GD/SGD run (Alg. 3) unrolled in time: every message's row on every gradient and noise draw.

Step t: θ_v^{t,0} = (1 − η_t λ) θ_v^t − η_t (g_v^t + z_v^t), then K rounds θ^{t,k+1} = W_{t,k} θ^{t,k},
and θ^{t+1} = θ^{t,K}; θ^0 = 0 is public. g is the clipped data gradient: the L2 regulariser's λθ
(added after clipping, `node.learning`) depends on no data and is linear, so its damping belongs in
the rows. Message (t, k, w) is θ_w^{t,k}, k = 0..K−1 (Muffliato sends the values it then mixes).
Each g_u^s is an input column and each noise draw z_u^s (std σ) its own noise column, never merged
(the matrix-factorization view of 20-accounting.md); z_u^s enters wherever g_u^s does, so one row
serves both (A = B). Column (u, s) is u·T + s: a node's T columns are contiguous.

These rows hold every g fixed: that is the *linearized* model (`sensitivity`), exact for
gradients that do not depend on the model, and no bound on a real run, whose gradients are taken
at models that carry hidden noise. Which of u's steps reach a message at all (`support`) is a
property of the schedule, whatever the gradients: the proven exact column counts them (`reachable`).

The realized schedule is the input: per round the linear map the nodes really applied (drop-outs
folded into the self-loop) and who received whose model. Chebyshev rounds are not a map of
θ^{t,k} alone (they need the realized affine rows) and are out of scope here.

In the linearized model a constant step size without a regulariser cancels (it scales each gradient
together with its own noise); a varying one does not (it reweights the steps against each other), nor
does the damping (1 − ηλ), so both are inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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
    schedule: Schedule, step_sizes: Sequence[float] | None = None, regularization: float = 0.0
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(t, k, C) for every round: C[w, u, s] is the coefficient of g_u^s (and of z_u^s) in θ_w^{t,k}.

    Streams one round at a time; each C is a fresh array. Step sizes default to 1 (any constant, without a
    regulariser); `regularization` λ damps every model by (1 − η_t λ) as step t opens.
    """
    n, steps = schedule.n, schedule.steps
    eta = np.ones(steps) if step_sizes is None else np.asarray(step_sizes, dtype=float)
    if eta.shape != (steps,):
        raise ValueError(f"need one step size per step, {steps}, got {eta.shape}")
    current = np.zeros((n, n, steps))
    nodes = np.arange(n)
    for t, maps in enumerate(schedule.mixing):
        current = current * (1.0 - eta[t] * regularization)
        current[nodes, nodes, t] -= eta[t]
        for k, mixing in enumerate(maps):
            yield t, k, current
            current = (mixing @ current.reshape(n, n * steps)).reshape(n, n, steps)


def support(schedule: Schedule) -> Iterator[tuple[int, int, np.ndarray]]:
    """(t, k, R) for every round: R[w, u, s] is whether θ_w^{t,k} depends on u's step s at all, i.e. a
    time-respecting path of the realized schedule (a nonzero weight in every round it crosses) leads there.

    The nonzero pattern of `coefficients` without its arithmetic, so no cancellation or underflow can hide a
    path, and whatever the gradients: a model reached by u's step is a function of it, a model not reached is not.
    """
    n, steps = schedule.n, schedule.steps
    current = np.zeros((n, n * steps), dtype=bool)
    diagonal = np.arange(n) * steps + np.arange(n) * n * steps
    for t, maps in enumerate(schedule.mixing):
        current.ravel()[diagonal + t] = True  # a fresh array: the last round's product, never yielded
        for k, mixing in enumerate(maps):
            yield t, k, current.reshape(n, n, steps)
            current = ((mixing != 0).astype(np.float32) @ current.astype(np.float32)) > 0


@dataclass(frozen=True)
class UnrolledRun:
    """One row per message some node received, on the n·T columns (u, s) of g_u^s and z_u^s alike."""

    n: int
    steps: int
    rows: np.ndarray  # (m, n·T)
    messages: tuple[Message, ...]  # what each row is, sorted by (t, k, w)
    received: tuple[tuple[int, ...], ...]  # per node v: the rows in v's view, ascending
    reached: np.ndarray  # (m, n·T) bool: the step (u, s) reaches the message (`support`)

    def column(self, node: int, step: int) -> int:
        """The column of g_node^step (and z_node^step)."""
        return node * self.steps + step

    def reached_steps(self, observers: Iterable[int]) -> np.ndarray:
        """How many of every node's steps reach some message these observers received: [u]."""
        rows = sorted({i for v in observers for i in self.received[v]})
        return self.reached[rows].any(axis=0).reshape(self.n, self.steps).sum(axis=1)

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


def unroll(schedule: Schedule, step_sizes: Sequence[float] | None = None, regularization: float = 0.0) -> UnrolledRun:
    """The rows of every model some node received, from the realized schedule (`coefficients`' arguments)."""
    n = schedule.n
    rows: list[np.ndarray] = []
    reached: list[np.ndarray] = []
    messages: list[Message] = []
    for (t, k, current), (_, _, reaching) in zip(coefficients(schedule, step_sizes, regularization),
                                                 support(schedule)):
        senders = sorted(set().union(*schedule.received[t][k]))
        messages.extend((t, k, w) for w in senders)
        rows.append(current[senders].reshape(len(senders), n * schedule.steps))
        reached.append(reaching[senders].reshape(len(senders), n * schedule.steps))
    index = {message: i for i, message in enumerate(messages)}
    received = tuple(
        tuple(index[t, k, w] for t, views in enumerate(schedule.received)
              for k, senders in enumerate(views) for w in sorted(senders[v]))
        for v in range(n)
    )  # fmt: skip
    width = n * schedule.steps
    table = np.vstack(rows) if rows else np.zeros((0, width))
    support_table = np.vstack(reached) if reached else np.zeros((0, width), dtype=bool)
    return UnrolledRun(n=n, steps=schedule.steps, rows=table, messages=tuple(messages), received=received,
                       reached=support_table)
