"""Account a Muffliato-GD/SGD run: its realized schedule, unrolled, and every column per pair.

The rebuilt Transcript (rounds t·K + k, each on its step's graph, drop-outs included) gives
every round's realized mixing map and who received whose model; `unrolled` turns that into
rows on one gradient column and one noise column per node per step; `sensitivity` gives the
exact factor over all of u's steps; `paper` gives Thm 6 (Eq. 9) and, with one gossip round
per step, the corrected closed form; `canary` gives the empirical column (one-run canary audit,
each pair's canaries along the sign direction attaining the sensitivity's lower end).
"""

from __future__ import annotations

from typing import Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model, all_pairs
from coordinator_tools.audit.canary import DEFAULT_CANARIES, canary_column, canary_note
from coordinator_tools.audit.exact import RECONSTRUCT_TOL, ViewGeometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.protocols.muffliato_gd.paper import corrected_sum, eq9_sum
from coordinator_tools.audit.protocols.muffliato_gd.sensitivity import gradient_sensitivity
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import Schedule, unroll
from node.errors import ConfigError

PAPER_NOTE = "paper: Muffliato Thm 6 (Eq. 9) on the realized graphs of every step, summed over steps"
CORRECTED_NOTE = ("paper_corrected: the closed form that counts later steps (20-accounting.md), on the realized "
                  "graphs, capped at local DP; evidence-backed, not a proven bound")
EXACT_NOTES = {
    "least_squares": "exact: the matrix-factorization sensitivity of the whole view (affine-Gaussian: exact)",
    "logistic": "exact (adaptive bound): the matrix-factorization sensitivity, an upper bound for adaptive "
                "gradients",
}


def learning_schedule(transcript: Transcript) -> Schedule:
    """Every round's realized map (a node that stopped keeps its model) and who received whose model."""
    n, per_step = transcript.n, transcript.rounds_per_step
    if transcript.accelerated and per_step > 1:
        raise ConfigError("exact accounting of Chebyshev rounds inside a learning step is not supported; "
                          "run Muffliato-GD with plain gossip (--plain) or one gossip round per step")
    steps = transcript.rounds // per_step
    mixing: list[tuple[np.ndarray, ...]] = []
    received: list[tuple[tuple[frozenset[int], ...], ...]] = []
    heard = [{} for _ in range(n)]
    for v in range(n):
        for w, r in transcript.received[v]:
            heard[v].setdefault(r, set()).add(w)
    for t in range(steps):
        maps, views = [], []
        for k in range(per_step):
            r = t * per_step + k
            matrix = np.eye(n)
            for v in range(n):
                if transcript.completed_rounds(v) > r:
                    matrix[v] = 0.0
                    for peer, weight in transcript.realized_row(v, r).items():
                        matrix[v, peer] = weight
            maps.append(matrix)
            views.append(tuple(frozenset(heard[v].get(r, ())) for v in range(n)))
        mixing.append(tuple(maps))
        received.append(tuple(views))
    return Schedule(n=n, mixing=tuple(mixing), received=tuple(received))


def planned_geometry(transcript: Transcript, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """Every pair's sens²/Δ² at its upper end, σ-free: what calibrating σ for a target needs."""
    return gradient_sensitivity(unroll(learning_schedule(transcript)), threat_model).upper


def account(transcript: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of the learning run in `transcript` at the options' noise, Δ, order and δ.

    The attack options drive the canary audit: `attack_pairs` its pairs, `attack_runs` the
    canaries per source node (default DEFAULT_CANARIES), `rng_seed` its simulation.
    """
    threat_model = options.get("threat_model", ThreatModel())
    attack_pairs = options.pop("attack_pairs", None)
    canaries = options.pop("attack_runs", DEFAULT_CANARIES)
    seed = options.pop("rng_seed", None)
    schedule = learning_schedule(transcript)
    run = unroll(schedule)
    sensitivity = gradient_sensitivity(run, threat_model)
    geometry = ViewGeometry(
        lower=sensitivity.lower, upper=sensitivity.upper,
        reconstructable=sensitivity.lower >= run.steps * (1 - RECONSTRUCT_TOL),
        ill_conditioned=sensitivity.ill_conditioned, method="float-interval (general)")  # fmt: skip
    single_round = all(len(maps) == 1 for maps in schedule.mixing)
    notes = [PAPER_NOTE, EXACT_NOTES[transcript.topology.protocol.task]]
    if single_round:
        notes.append(CORRECTED_NOTE)
    model = run.linear_model()
    empirical = None
    if attack_pairs is not None:
        pairs = all_pairs(model, threat_model) if attack_pairs == "all" else attack_pairs
        empirical = canary_column(lambda v: run.linear_model(sensitivity.directions[:, v]), pairs, options,
                                  canaries=canaries, seed=seed)
        notes.append(canary_note(canaries, seed, direction="the pair's worst sign direction"))
    return account_model(
        model, eq9_sum(schedule, threat_model), geometry=geometry, releases=run.steps,
        paper_corrected_sum=corrected_sum(schedule, threat_model) if single_round else None, notes=notes,
        empirical_eps_lower=empirical, **options)  # fmt: skip
