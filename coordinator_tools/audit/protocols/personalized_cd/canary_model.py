"""The canary coordinates of a personalized-CD run: every broadcast some agent logged, unrolled to the canaries.

In an audit run each update of agent i adds its canaries c_i = (L₀/m_i)·s_i to its clipped gradient
and Laplace noise to both (`node.protocols.personalized_cd`), and update (6) is linear in every
coordinate, so in the canary coordinates the broadcast of its update t is

    Θ̃_i(t) = (1 − α_i) Θ̃_i(prev) + α_i Σ_j (W_ij / D_ii) Θ̃_j(used_j) − α_i μ c_i^conf (c_i + η_i,t)

with prev the agent's last broadcast before it that its log holds as sent (what a restarted agent
goes on from; the public zeros before the first), used_j the broadcast of neighbour j its
`step_inputs` record names (the public zeros for a neighbour it names none of), and η_i,t its draw,
Laplace of scale b = (2L₀/m_i) / ε_t at the ε_t its budget record logged. A private warm start is
release 0: no canaries, its own Laplace noise of scale √p (1 + tol) L₀ / (m_i λ_i ε_ws). A step of
model propagation after it, (Σ_j (W_ij / D_ii) Θ̃_j(used_j) + μ c_i^conf Θ̃_i(warm start)) / (1 + μ c_i^conf),
adds no canaries and no noise of its own: a combination of released broadcasts. Unrolled from
the zeros, each broadcast is planted · c + B · η: one row per broadcast some agent logged (received or
refused), named (sender, sequence) as the receivers' `model` records name it, one noise column per
(agent, paid release), its std √2·b relative to the report's σ = 1 (the logged scales).

α_i, c_i^conf = min(1, m_i/m_max) and the sensitivities depend on the agent's size m_i, which no
public record holds: its canary record's magnitude, L₀/m_i, gives it (the audit reads those records
anyway, for the signs). A broadcast whose sender's log, update record or size is missing, or that
used a broadcast its sender did not log as received, is left out of the model: a receiver's copy of
it is then scored as a value outside the model.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np

from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel
from coordinator_tools.audit.protocols.personalized_cd.run import BroadcastRun
from coordinator_tools.audit.records import MessageKey
from node.personalized import AgentProblem
from node.protocols.personalized_cd import MODEL, PersonalizedCDParams

Broadcast = tuple[int, int]  # (sender, sequence)
# A canary magnitude gives m_i = L₀ / magnitude when that is a whole number within this relative tolerance.
SIZE_RTOL = 1e-9


def agent_sizes(params: PersonalizedCDParams, magnitudes: Mapping[int, float]) -> dict[int, int]:
    """m_i of every agent whose canary record was read and names a whole number of examples (L₀ / magnitude)."""
    sizes = {}
    for agent, magnitude in magnitudes.items():
        examples = params.lipschitz / magnitude if 0.0 < magnitude < math.inf else 0.0
        if round(examples) >= 1 and abs(examples - round(examples)) <= SIZE_RTOL * examples:
            sizes[agent] = round(examples)
    return sizes


def canary_model(run: BroadcastRun, sizes: Mapping[int, int]) -> CanaryModel:
    """Every broadcast in some agent's view whose unrolling is known, as planted canaries and noise columns."""
    unrolled = _Unrolling(run, sizes)
    labels = tuple(sorted({b for view in run.views.values() for b in view if unrolled.row(b) is not None}))
    position = {label: j for j, label in enumerate(labels)}
    rows = [unrolled.row(label) for label in labels]
    planted = np.array([row[0] for row in rows]).reshape(len(labels), run.n)
    noise = np.array([row[1] for row in rows]).reshape(len(labels), len(unrolled.owners))
    model = LinearGaussianModel(
        n=run.n, inputs=planted, noise=noise, noise_owner=tuple(unrolled.owners),
        noise_scale=np.array(unrolled.scales),
        received=tuple(tuple(sorted(position[b] for b in run.views.get(v, ()) if b in position))
                       for v in range(run.n)),
    )  # fmt: skip
    law = "laplace" if run.topology.protocol.private else "gaussian"
    return CanaryModel(model, planted, labels, broadcast_label, noise=law)


def broadcast_label(key: MessageKey) -> Hashable | None:
    """A logged `model` message as (sender, sequence); None for any other kind."""
    return (key.peer, key.id.sequence) if key.kind == MODEL else None


class _Unrolling:
    """Each broadcast's (planted row, noise row), computed once, its dependencies first."""

    def __init__(self, run: BroadcastRun, sizes: Mapping[int, int]) -> None:
        self._run = run
        params: PersonalizedCDParams = run.topology.protocol
        self._params = params
        self._warm = params.warm_start_releases
        self._problems = {agent: AgentProblem.sized(params, run.topology, agent, examples)
                          for agent, examples in sizes.items() if agent in run.used}
        self.owners: list[int] = []
        self.scales: list[float] = []
        self._column: dict[tuple[int, int], int] = {}  # (agent, release) -> its noise column
        for agent, problem in sorted(self._problems.items()) if params.private else ():
            for release, epsilon in enumerate(run.spends.get(agent, ())):
                sensitivity = problem.warm_start_sensitivity if release < self._warm else problem.sensitivity
                self._column[agent, release] = len(self.owners)
                self.owners.append(agent)
                self.scales.append(math.sqrt(2.0) * sensitivity / epsilon)  # a Laplace draw's std
        self._rows: dict[Broadcast, tuple[np.ndarray, np.ndarray] | None] = {}

    def row(self, broadcast: Broadcast) -> tuple[np.ndarray, np.ndarray] | None:
        """The broadcast's coefficients of every agent's canaries and of every noise column; None: unknown."""
        stack, on_path = [(broadcast, False)], set()
        while stack:  # depth-first, post-order: a long run's chains of broadcasts need no recursion
            current, expanded = stack.pop()
            if current in self._rows:
                continue
            if expanded:
                on_path.discard(current)
                self._rows[current] = self._combined(current)
                continue
            needed = self._dependencies(current)
            if needed is None:
                self._rows[current] = None
                continue
            on_path.add(current)
            stack.append((current, True))
            stack.extend((b, False) for b in needed if b not in self._rows and b not in on_path)
        return self._rows[broadcast]

    def _dependencies(self, broadcast: Broadcast) -> list[Broadcast] | None:
        """The broadcasts this one is computed from (its sender's previous one, the neighbours' it used); None
        when its sender's log, size or update record is missing, or it used a broadcast its sender never logged."""
        agent, sequence = broadcast
        release, paid = sequence - 1, self._params.paid_release(sequence)
        spends = len(self._run.spends.get(agent, ()))
        if agent not in self._problems or (spends < self._warm if paid is None else paid >= spends):
            return None
        if release < self._warm:
            return []
        used = self._used(agent, release)
        if used is None or any(b not in self._run.views.get(agent, ()) for b in used.values()):
            return None
        if paid is None:  # a propagation step: its own warm start, then the neighbours'
            return [(agent, 1), *used.values()]
        previous = self._previous(agent, sequence)
        return ([] if previous is None else [previous]) + list(used.values())

    def _previous(self, agent: int, sequence: int) -> Broadcast | None:
        """The agent's last broadcast before this one that its log holds as sent (None: it starts from zeros)."""
        before = [q for q in self._run.sent[agent] if q < sequence]
        return (agent, max(before)) if before else None

    def _used(self, agent: int, release: int) -> dict[int, Broadcast] | None:
        """Neighbour -> the broadcast of it the wake-up of this release used (a neighbour absent: its zeros)."""
        inputs = self._run.used[agent].get(release - self._warm)
        weights = self._problems[agent].weights
        return None if inputs is None else {peer: (peer, inputs[peer]) for peer in weights if peer in inputs}

    def _combined(self, broadcast: Broadcast) -> tuple[np.ndarray, np.ndarray] | None:
        """Update (6), or a propagation step (16), on the canary coordinates, from the rows of the broadcasts it depends
        on."""
        agent, sequence = broadcast
        release, paid = sequence - 1, self._params.paid_release(sequence)
        planted, noise = np.zeros(self._run.n), np.zeros(len(self.owners))
        column = None if paid is None else self._column.get((agent, paid))
        if release < self._warm:  # the warm start: its noise alone
            if column is not None:
                noise[column] = 1.0
            return planted, noise
        problem = self._problems[agent]
        used = self._used(agent, release) or {}
        if paid is None:
            pull = problem.mu * problem.confidence
            parts = [(pull / (1.0 + pull), (agent, 1))]
            parts += [(problem.weights[peer] / (1.0 + pull), source) for peer, source in used.items()]
            return self._sum(parts)
        previous = self._previous(agent, sequence)
        parts = [] if previous is None else [(1.0 - problem.step, previous)]
        parts += [(problem.step * problem.weights[peer], source) for peer, source in used.items()]
        combined = self._sum(parts)
        if combined is None:
            return None
        planted, noise = combined
        own = problem.step * problem.mu * problem.confidence
        planted[agent] -= own
        if column is not None:
            noise[column] -= own
        return planted, noise

    def _sum(self, parts: list[tuple[float, Broadcast]]) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows of these broadcasts, weighted; None when one of them is unknown."""
        planted, noise = np.zeros(self._run.n), np.zeros(len(self.owners))
        for coefficient, source in parts:
            row = self._rows.get(source)
            if row is None:  # unknown, or on a cycle of forged records
                return None
            planted += coefficient * row[0]
            noise += coefficient * row[1]
        return planted, noise
