"""Account a Muffliato-GD/SGD run: its realized schedule, unrolled, and every column per pair.

The rebuilt Transcript (rounds t·K + k, each on its step's graph, drop-outs included) gives
every round's realized mixing map and who received whose model; `unrolled` turns that into
rows on one gradient column and one noise column per node per step. `exact` is the proven bound
(`reachable`): how many of u's steps reach v's view, composed; `linearized` the
matrix-factorization value of the rows with every other gradient held fixed (`sensitivity`, the
worst case over the steps' directions in R^D), which is no bound on a run; `paper` gives Thm 6
(Eq. 9) and, with one gossip round per step, the corrected closed form; `canary` gives the model
attack (canaries simulated on the linearized model, each pair's along its best sign direction).
"""

from __future__ import annotations

from typing import Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model, all_pairs
from coordinator_tools.audit.canary import DEFAULT_CANARIES, canary_column, canary_note
from coordinator_tools.audit.empirical import CanaryModel
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.muffliato.accountant import round_value
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.protocols.muffliato_gd.paper import corrected_sum, eq9_sum
from coordinator_tools.audit.protocols.muffliato_gd.sensitivity import gradient_sensitivity
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import Schedule, UnrolledRun, unroll
from coordinator_tools.audit.reachable import linearized_column, reachable_geometry, state_assumptions
from coordinator_tools.audit.views import coalition
from node.errors import ConfigError

PAPER_NOTE = "paper: Muffliato Thm 6 (Eq. 9) on the realized graphs of every step, summed over steps"
CORRECTED_NOTE = ("paper_corrected: the closed form that counts later steps (20-accounting.md), on the realized "
                  "graphs, capped at local DP; evidence-backed, not a proven bound")
DIRECTIONS_NOTE = ("linearized: the worst case over the directions of the source's {steps} gradient steps in "
                   "R^{dimension}, a certified interval of the linearized model: linearized_*_upper is proven for that "
                   "model by weak duality, linearized_rdp/eps is reached in it by real gradients")
DEFINITIONS = {
    "paper": "Muffliato Thm 6 (Eq. 9) on the realized graphs of every step, summed over steps: it counts each "
             "step's gradient in that step's messages only",
    "paper_corrected": "the closed form that also counts u's gradient in later steps' messages, on the realized "
                       "graphs, capped at local DP (one gossip round per step only); evidence-backed, not a proven "
                       "bound",
    "linearized": "the matrix-factorization value of v's whole view with every node's per-step gradient a fixed "
                  "input and u's moved by at most Delta per step, the worst case over the steps' directions in R^D "
                  "(a certified interval of that model: rdp/eps reached, rdp_upper/eps_upper proven), the "
                  "regulariser's damping (1 - eta lambda) in the rows; exact for gradients that do not depend on "
                  "the model, and the worst case for a view that holds every node's noisy step (2 nodes, local DP)",
    "ldp": "each of u's T noisy gradient steps seen directly",
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


def canary_model(transcript: Transcript) -> CanaryModel:
    """The run's canary coordinates: every step's contribution carries the node's canaries, so a model's canary
    block is the sum of its rows over the node's steps; a value is named (sender, round), its payload is γ times
    the unrolled row (the rows hold −1 per step: a constant step size, and no regulariser on canary coordinates)."""
    run = unroll(learning_schedule(transcript))
    model = run.linear_model()
    labels = tuple((w, t * transcript.rounds_per_step + k) for t, k, w in run.messages)
    return CanaryModel(model, model.inputs, labels, round_value, scale=transcript.topology.protocol.learning_rate)


def linearized_run(transcript: Transcript, schedule: Schedule) -> UnrolledRun:
    """The rows of the linearized model: the run's step size, and the regulariser's damping, on the data coordinates."""
    params = transcript.topology.protocol
    return unroll(schedule, np.full(schedule.steps, params.learning_rate), params.regularization)


def reachable_counts(run: UnrolledRun, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """c [u, v]: how many of u's steps reach some model v (or v's coalition) received; NaN where u observes."""
    n = run.n
    counts = np.full((n, n), np.nan)
    for v in range(n):
        members = coalition(v, threat_model, n)
        sources = [u for u in range(n) if u not in members]
        counts[sources, v] = run.reached_steps(members)[sources]
    return counts


def planned_geometry(transcript: Transcript, threat_model: ThreatModel = ThreatModel()) -> np.ndarray:
    """Every pair's σ-free factor of the exact column, the proven bound c: what calibrating σ for a target needs."""
    return reachable_counts(unroll(learning_schedule(transcript)), threat_model)


def account(transcript: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of the learning run in `transcript` at the options' noise, Δ, order and δ.

    The attack options drive the canary audit: `attack_pairs` its pairs, `attack_runs` the
    canaries per source node (default DEFAULT_CANARIES), `rng_seed` its simulation.
    """
    threat_model = options.get("threat_model", ThreatModel())
    attack_pairs = options.pop("attack_pairs", None)
    canaries = options.pop("attack_runs", DEFAULT_CANARIES)
    seed = options.pop("rng_seed", None)
    params = transcript.topology.protocol
    schedule = learning_schedule(transcript)
    run = linearized_run(transcript, schedule)
    sensitivity = gradient_sensitivity(run, params.dimension, threat_model)
    single_round = all(len(maps) == 1 for maps in schedule.mixing)
    notes = [PAPER_NOTE, DIRECTIONS_NOTE.format(steps=run.steps, dimension=params.dimension)]
    if single_round:
        notes.append(CORRECTED_NOTE)
    model = run.linear_model()
    model_attack = None
    if attack_pairs is not None:
        pairs = all_pairs(model, threat_model) if attack_pairs == "all" else attack_pairs
        model_attack = canary_column(lambda v: run.linear_model(sensitivity.directions[:, v]), pairs, options,
                                     canaries=canaries, seed=seed)
        notes.append(canary_note(canaries, seed, direction="the pair's worst sign direction of the linearized model"))
    losses = account_model(
        model, eq9_sum(schedule, threat_model), geometry=reachable_geometry(reachable_counts(run, threat_model)),
        releases=run.steps, paper_corrected_sum=corrected_sum(schedule, threat_model) if single_round else None,
        notes=notes, model_attack_eps_lower=model_attack, **options)  # fmt: skip
    definitions = {name: text for name, text in DEFINITIONS.items() if single_round or name != "paper_corrected"}
    state_assumptions(losses, linearized_column(sensitivity.lower, sensitivity.upper, options), definitions)
    return losses
