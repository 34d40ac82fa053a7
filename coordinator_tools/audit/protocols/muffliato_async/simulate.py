"""Plan a randomized Muffliato run ex ante: account simulated schedules and average them.

Each simulated schedule runs every node's Poisson clock (rate `tick_rate`, for `exchanges`
ticks or `duration_s` seconds); on a tick the node picks a neighbour with the topology's
activation probabilities and the pair averages at once (no failures). Each schedule is
accounted like a realized run; the ex-ante loss is that of the mixture over schedules when
the observer learns the schedule (`plan.mixture_losses`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.accountants import CONVERSION_NOTES
from coordinator_tools.audit.conversion import closed_form_mixture_epsilon, gaussian_rdp, mixture_rdp, squared_mu
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.paper import message_share_sum
from coordinator_tools.audit.plan import Plan, PlanOptions, baseline_sigmas, calibrate_mixture_sigma, mixture_losses
from coordinator_tools.audit.protocols.base import run_header
from coordinator_tools.audit.protocols.muffliato_async.accountant import PAPER_NOTE, linear_model
from coordinator_tools.audit.protocols.muffliato_async.schedule import Exchange, ExchangeSchedule
from node.protocols.muffliato_async import PROTOCOL_NAME, MuffliatoAsyncParams, activation
from node.topology import Topology

DEFAULT_SCHEDULES = 20
DEFAULT_SEED = 0


def simulated_schedule(topology: Topology, rng: np.random.Generator) -> ExchangeSchedule:
    """One schedule of the topology's clocks: every tick an exchange that both sides commit."""
    params, n = topology.protocol, topology.n
    ticks = [(time, node) for node in range(n) for time in _clock(params, rng)]
    choices = [activation(topology, node) for node in range(n)]
    sequence = [0] * n
    exchanges: list[Exchange] = []
    received: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for _, node in sorted(ticks):
        neighbours, probabilities = choices[node]
        peer = int(neighbours[rng.choice(len(neighbours), p=probabilities)])
        sequence[node] += 1
        sequence[peer] += 1
        exchanges.append(Exchange(f"{node}-{sequence[node]}", node, peer, sequence[node], sequence[peer],
                                  initiator_applied=True, responder_applied=True))
        received[node].append((peer, len(exchanges) - 1))
        received[peer].append((node, len(exchanges) - 1))
    counts = [sum(node == tick for _, tick in ticks) for node in range(n)]
    return ExchangeSchedule(topology, tuple(exchanges), tuple(map(tuple, received)), tuple(counts))


def _clock(params: MuffliatoAsyncParams, rng: np.random.Generator) -> np.ndarray:
    """Tick times of one node's Poisson clock under the stopping rule."""
    gaps = 1.0 / params.tick_rate
    if params.exchanges is not None:
        return np.cumsum(rng.exponential(gaps, size=params.exchanges))
    times: list[float] = []
    now = rng.exponential(gaps)
    while now < params.duration_s:
        times.append(now)
        now += rng.exponential(gaps)
    return np.array(times)


@dataclass(frozen=True)
class PlannedSchedules:
    """The simulated schedules a plan averaged over (what its report's `run` describes)."""

    topology: Topology
    schedules: tuple[ExchangeSchedule, ...]

    protocol = PROTOCOL_NAME

    @property
    def n(self) -> int:
        return self.topology.n

    def run_section(self) -> dict[str, object]:
        params = self.topology.protocol
        return run_header(self.topology) | {
            "activation": params.activation,
            "schedules": len(self.schedules),
            "ticks_per_node": params.exchanges,
            "duration_s": params.duration_s,
            "mean_exchanges": float(np.mean([len(s.exchanges) for s in self.schedules])),
        }

    def node_summary(self, node: int) -> dict[str, object]:
        return {"mean_ticks": float(np.mean([s.ticks[node] for s in self.schedules]))}


def plan_ex_ante(topology: Topology, options: PlanOptions) -> Plan:
    """Account `options.schedules` simulated schedules of the topology and report their mixture."""
    params = topology.protocol
    sigma = params.sigma if options.sigma is None else options.sigma
    sensitivity = params.sensitivity if options.sensitivity is None else options.sensitivity
    alpha = params.alpha if options.alpha is None else options.alpha
    count = options.schedules or DEFAULT_SCHEDULES
    seed = DEFAULT_SEED if options.seed is None else options.seed
    rng = np.random.default_rng(seed)
    schedules = tuple(simulated_schedule(topology, rng) for _ in range(count))
    models = [linear_model(schedule) for schedule in schedules]
    geometries = [view_geometry(model, options.threat_model) for model in models]
    shares = np.stack([message_share_sum(model, options.threat_model) for model in models])
    details: dict[str, object] = {
        "schedules": count, "seed": seed, "activation": params.activation, "ticks_per_node": params.exchanges,
        "duration_s": params.duration_s,
        "ex_ante": "mixture over the simulated schedules, the schedule revealed to the observer: "
                   "RDP (1/(alpha-1)) log E exp((alpha-1) rdp), exact (eps, delta) from the averaged profile",
    }
    if options.target is not None:
        upper = np.stack([geometry.upper for geometry in geometries])
        sigmas = {"exact": calibrate_mixture_sigma(upper, sensitivity=sensitivity, delta=options.delta,
                                                   target=options.target),
                  **baseline_sigmas(topology.n, sensitivity=sensitivity, delta=options.delta, target=options.target)}
        sigma = sigmas["exact"]
        details["calibration"] = {"target_eps": options.target.epsilon, "rule": options.target.rule, "sigma": sigmas}
    paper = np.sqrt(squared_mu(shares, sigma=sigma, sensitivity=sensitivity))
    paper_columns = (mixture_rdp(gaussian_rdp(paper, alpha), alpha),
                     closed_form_mixture_epsilon(paper, options.delta, alpha=alpha, conversion=options.conversion))
    losses = mixture_losses(geometries, paper_columns, sigma=sigma, sensitivity=sensitivity, alpha=alpha,
                            delta=options.delta, threat_model=options.threat_model, paper_conversion=options.conversion,
                            notes=[PAPER_NOTE, CONVERSION_NOTES[options.conversion]])
    clock = f"{params.exchanges} ticks" if params.exchanges else f"{params.duration_s:g} s of ticks"
    headline = (f"n = {topology.n}, randomized gossip ex ante over {count} simulated schedules "
                f"(seed {seed}, {clock} per node), sigma = {sigma:.6g}")
    return Plan(run=PlannedSchedules(topology, schedules), losses=losses, details=details, headline=headline)
