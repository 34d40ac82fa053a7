"""What an observer saw and what it can subtract, under a threat model.

Every accountant (paper, exact, attack) reads an observer's view through this module, so
"who observes", "which messages" and "which noise is unknown" are decided in one place.
With collusion, each member of the coalition is accounted as the coalition: one observer
whose view is the union of their views and who knows all of their inputs. An observer that
knows its own noise knows every draw it holds, a pairwise secret's shared with a neighbour
included (so terms that cancel on its own edges hide nothing from it); a coalition knows
every draw any member holds. An external eavesdropper sees every message and knows no draw;
its losses fill every observer column v (sources u ≠ v), the same view each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.core import EPS, LinearGaussianModel, gram
from coordinator_tools.audit.losses import ThreatModel


@dataclass(frozen=True)
class ObserverView:
    """One observer's view: the model rows it received (ascending), among n nodes."""

    observers: tuple[int, ...]
    messages: tuple[int, ...]
    n: int
    knows_own_noise: bool
    knows_inputs: bool = True  # False for an external eavesdropper: no node's input is its own

    @property
    def known_inputs(self) -> list[int]:
        """The inputs the observer holds itself: its own (or its coalition's), none for an eavesdropper."""
        return list(self.observers) if self.knows_inputs else []

    @property
    def hidden(self) -> list[int]:
        """Columns of z = x + η the observer cannot subtract (one-draw-per-input models): all
        but its own if it knows its own noise, all of them if it knows only its own input
        (Muffliato Eq. 5)."""
        known = set(self.observers) if self.knows_own_noise else set()
        return [k for k in range(self.n) if k not in known]

    def sources(self) -> list[int]:
        """The nodes whose privacy this view is accounted for."""
        return [u for u in range(self.n) if u not in self.observers]

    def rows(self, matrix: np.ndarray) -> np.ndarray:
        """K: the view's rows of `matrix` on the hidden columns (one-draw-per-input models).

        Each row is divided by the norm of the whole message row (never zero for averaging:
        rows sum to 1). Scaling a message does not change what it reveals, and rows of
        comparable size keep rank cut-offs about information rather than about how far gossip
        has shrunk a row.
        """
        full = matrix[list(self.messages)]
        return full[:, self.hidden] / np.linalg.norm(full, axis=1, keepdims=True)

    def matrices(self, model: LinearGaussianModel,
                 columns: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(signal A e_u for every source u, or every input of `columns`; noise map B S on the unknown draws),
        rows normalised."""
        rows = list(self.messages)
        inputs, noise = model.inputs[rows], model.noise_rows[rows] * model.scales
        norms = np.sqrt(np.sum(np.square(inputs), axis=1) + np.sum(np.square(noise), axis=1))[:, None]
        norms[norms == 0] = 1.0
        signal = self.sources() if columns is None else list(columns)
        return inputs[:, signal] / norms, noise[:, self.unknown_draws(model)] / norms

    def gram_matrices(self, model: LinearGaussianModel,
                      columns: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """`matrices`' signal, the Gram M Mᵀ of its noise map, and a bound on that Gram's rounding (∞-norm),
        without the m × k noise map: the Gram of the view's whole noise rows, less that of the few draws the
        observer knows (its own, its edges' pairwise secrets)."""
        rows = list(self.messages)
        inputs, noise = model.inputs[rows], model.noise_rows[rows]
        noise *= model.scales  # in place: an eavesdropper's rows are the whole noise matrix
        whole = gram(noise, model.noise_ends[rows])
        known = noise[:, self._known(model)]
        squared = np.sum(np.square(inputs), axis=1) + np.diag(whole)
        norms = np.sqrt(np.where(squared == 0, 1.0, squared))
        scaled = (whole - known @ known.T) / norms[:, None] / norms[None, :]
        # Each entry of both products is within k·eps·‖b_i‖‖b_j‖ ≤ k·eps after normalising (Cauchy–Schwarz), their
        # difference within 2 eps more: over a row, m times that.
        error = 2 * len(rows) * (noise.shape[1] + 1) * EPS
        signal = self.sources() if columns is None else list(columns)
        return inputs[:, signal] / norms[:, None], scaled, error

    def unknown_draws(self, model: LinearGaussianModel) -> list[int]:
        """The noise columns of `model` the observer cannot subtract (the columns of `matrices`' noise map)."""
        return np.flatnonzero(~self._known(model)).tolist()

    def _known(self, model: LinearGaussianModel) -> np.ndarray:
        """Whether the observer knows each noise column: one it (or a coalition member) holds."""
        if not self.knows_own_noise:
            return np.zeros(len(model.holders), dtype=bool)
        known: np.ndarray = np.any(model.holder_matrix[:, list(self.observers)], axis=1)
        return known


def coalition(observer: int, threat_model: ThreatModel, n: int) -> tuple[int, ...]:
    """The observers accounted together with `observer`: its coalition, or itself alone."""
    members = tuple(sorted(set(threat_model.collusion)))
    if any(not 0 <= member < n for member in members):
        raise ValueError(f"colluding observers {members} name a node outside 0..{n - 1}")
    return members if observer in members else (observer,)


def observer_view(model: LinearGaussianModel, observer: int, threat_model: ThreatModel) -> ObserverView:
    """The view of `observer`, or of the coalition it belongs to."""
    if threat_model.eavesdropper:
        messages = sorted({row for view in model.received for row in view})
        return ObserverView(observers=(observer,), messages=tuple(messages), n=model.n, knows_own_noise=False,
                            knows_inputs=False)
    observers = coalition(observer, threat_model, model.n)
    messages = sorted({row for member in observers for row in model.received[member]})
    return ObserverView(observers=observers, messages=tuple(messages), n=model.n,
                        knows_own_noise=threat_model.observer_knows_own_noise)


def observer_views(model: LinearGaussianModel, threat_model: ThreatModel) -> list[ObserverView]:
    """observer_view for every node v = 0..n-1 (column v of the pairwise arrays)."""
    return [observer_view(model, v, threat_model) for v in range(model.n)]
