"""Each registered protocol's command-line options, and how they become its published Params.

`netdp topology generate | import --protocol NAME` accepts NAME's options and refuses the
others' with a one-line error. A protocol's plug-in may name its own `ProtocolOptions` (its
Params model, the options that set its fields, and, when some of its defaults depend on the
graph or on its other options, or `topology show` should print more, two small hooks); netdp's
own protocols do, below. A protocol that names none gets one option per Params field, its flag
the field's name, its help the field's description, its default the field's own
(`fields_as_options`); a field whose flag another protocol already defines for the same field
shares that option.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

import networkx as nx
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from coordinator_tools.theory import (
    muffliato_mse_bound,
    muffliato_t_stop,
    worst_case_spread,
)
from coordinator_tools.topology.build import DerivedWeighting, gossip_mixing
from node.errors import ConfigError
from node.learning import Adjacency, derived_sensitivity
from node.protocols.decor import SIGMA_COR_DESCRIPTION
from node.protocols.decor_gd import DecorGDParams
from node.protocols.muffliato import MuffliatoParams
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.protocols.personalized_cd import BudgetSplit, PersonalizedCDParams
from node.protocols.registry import load_attribute, plugins, protocol_spec
from node.protocols.ring_histogram import (
    RingHistogramParams,
    calibrate_gamma,
    initial_elements,
    rr_epsilon,
)
from node.protocols.ring_histogram_bound import corollary_conditions, proof_bound
from node.protocols.ring_sum import NoisePlacement, RingSumParams
from node.protocols.rw_sgd import RwSgdParams, SenderView
from node.protocols.secure_neighbourhood import MASK_RATIO_DESCRIPTION
from node.protocols.secure_neighbourhood_gd import SecureNeighbourhoodGDParams
from node.protocols.walk_sum import WalkSumParams
from node.protocols.zero_sum_gd import ZeroSumGDParams
from node.topology import ErdosRenyiSchedule, GraphSchedule, GraphShape, Topology

DEFAULT_PROTOCOL = "muffliato"
AVERAGING_SENSITIVITY = 1.0  # Delta of the averaging protocols when not given: inputs clipped to norm 1/2
Fields = dict[str, Any]
NOT_OPTIONS = frozenset({"name", "canaries"})  # the union's tag; the canaries `netdp run --canaries` plants
SummaryRows = list[tuple[str, object]]


@dataclass(frozen=True)
class Option:
    """One command-line option that sets one field of a protocol's Params."""

    flag: str
    field: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    default: Any = None  # the command line's own default, for fields the Params model leaves required
    sets: Any = None  # a switch: the flag takes no value and sets the field to this

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class GraphFacts:
    """What a protocol's defaults may depend on; the spectral gap is only computed when asked for."""

    graph: nx.Graph
    weighting: DerivedWeighting
    explicit_weights: dict[tuple[int, int], float] | None
    schedule: GraphSchedule

    @property
    def n(self) -> int:
        return self.graph.number_of_nodes()

    @property
    def shape(self) -> GraphShape:
        """The published graph's shape: the commands publish undirected graphs, or ones drawn per step."""
        return "erdos_renyi" if isinstance(self.schedule, ErdosRenyiSchedule) else "undirected"

    @cached_property
    def spectral_gap(self) -> float:
        if self.shape == "erdos_renyi":  # the given graph only counts the nodes: its gap would be another graph's
            raise ValueError("a graph drawn per step has no spectral gap")
        return gossip_mixing(self.graph, self.weighting, self.explicit_weights).spectral_gap


def _no_derived_fields(fields: Fields, graph: GraphFacts) -> Fields:
    return fields


def _no_summary_rows(topology: Topology) -> SummaryRows:
    return []


@dataclass(frozen=True)
class ProtocolOptions:
    """One protocol as the topology commands see it."""

    params: type[BaseModel]
    options: tuple[Option, ...]
    derive: Callable[[Fields, GraphFacts], Fields] = _no_derived_fields  # defaults that need the graph or fields
    summary: Callable[[Topology], SummaryRows] = _no_summary_rows  # extra rows for `topology show`


ALPHA = Option("--alpha", "alpha", "Renyi order used in reports", float, default=2.0)
DIMENSION = Option("--dimension", "dimension", "length D of every node's vector (learning: the model's, one entry "
                   "per feature)", int, default=1)
TICK_RATE = Option("--tick-rate", "tick_rate", "rate of each node's Poisson clock, per second", float)
CYCLES = Option("--cycles", "cycles", "K: times the token goes round the ring", int)
NOISY_VECTOR_OPTIONS = (
    Option("--sigma", "sigma", "std of each Gaussian noise draw (averaging: once per node; learning: every "
           "gradient step; token sums: sigma_loc of a noisy contribution)", float, default=1.0),
    Option("--sensitivity", "sensitivity", "l2 sensitivity Delta: how far the vector a node noises can move "
           "between adjacent datasets (averaging and token sums: its input, clipped to norm Delta/2, default "
           f"{AVERAGING_SENSITIVITY}; learning: a step's gradient, default derived from --clip, --adjacency and "
           "--batch)", float),
    ALPHA,
    DIMENSION,
)
STEPS = Option("--steps", "steps", "T: gradient steps (learning); contributions the token collects (walk, default "
               "n: one visit per node on average)", int)
LEARNING_OPTIONS = (
    Option("--task", "task", "local loss: a registered learning task, netdp's logistic (regression on labels +-1), "
           "least_squares or recommendation, or an installed plug-in's", default="logistic"),
    Option("--learning-rate", "learning_rate", "step size eta", float, default=0.5),
    Option("--clip", "clip", "per-example gradient norm bound C", float, default=1.0),
    Option("--batch", "batch", "minibatch size b, taken cyclically from the local data (SGD; "
           "default: the whole local set, GD)", int),
    Option("--adjacency", "adjacency", "adjacent datasets differ in one example (Delta = 2C/b) or in a "
           "node's whole dataset (Delta = 2C)", choices=get_args(Adjacency)),
    Option("--regularization", "regularization", "L2 regularisation lambda", float),
)
PLAIN = Option("--plain", "accelerated", "plain gossip instead of Chebyshev acceleration, which needs a fixed "
               "graph's spectral gap (on a graph drawn per step, plain is the default and the only choice)",
               sets=False)


def _averaging_defaults(fields: Fields, graph: GraphFacts) -> Fields:
    """Delta defaults to a constant for averaging: the inputs are clipped to it, whatever the graph."""
    return {"sensitivity": AVERAGING_SENSITIVITY, **fields}


def _muffliato_defaults(fields: Fields, graph: GraphFacts) -> Fields:
    """Delta as for averaging; rounds: T_stop of Muffliato Thm 2 for the worst-case spread, safe whatever the data."""
    fields = _averaging_defaults(fields, graph)
    if "rounds" in fields:
        return fields
    accelerated = fields.get("accelerated", _model_default(MuffliatoParams, "accelerated"))
    rounds = _worst_case_t_stop(graph.n, graph.spectral_gap, fields["sigma"], fields["sensitivity"], accelerated)
    return {**fields, "rounds": rounds}


def _worst_case_t_stop(n: int, gap: float, sigma: float, sensitivity: float, accelerated: bool) -> int:
    """T_stop for the largest spread inputs clipped to norm sensitivity/2 can have: safe whatever the data."""
    return muffliato_t_stop(n, gap, sigma, worst_case_spread(sensitivity), accelerated=accelerated)


def _muffliato_summary(topology: Topology) -> SummaryRows:
    protocol = topology.protocol
    if protocol.sigma == 0.0:
        t_stop: object = "none (sigma = 0)"
    else:
        t_stop = _worst_case_t_stop(
            topology.n, topology.spectral_gap, protocol.sigma, protocol.sensitivity, protocol.accelerated)
    return [
        ("T_stop (worst-case spread)", t_stop),
        ("MSE bound 3 sigma^2 / n", f"{muffliato_mse_bound(topology.n, protocol.sigma):.6g}"),
    ]


def _learning_defaults(fields: Fields, graph: GraphFacts) -> Fields:
    """Delta from the clip, adjacency and batch unless given."""
    if "sensitivity" in fields:
        return fields
    adjacency = fields.get("adjacency", _model_default(MuffliatoGDParams, "adjacency"))
    return {"sensitivity": derived_sensitivity(fields["clip"], adjacency, fields.get("batch")), **fields}


def _gd_defaults(fields: Fields, graph: GraphFacts) -> Fields:
    """Delta as for every learning protocol; plain gossip on a graph drawn per step.

    A graph drawn per step has no spectral gap for Chebyshev acceleration to use.
    """
    fields = _learning_defaults(fields, graph)
    return {"accelerated": False, **fields} if graph.shape == "erdos_renyi" else fields


def _walk_defaults(fields: Fields, graph: GraphFacts) -> Fields:
    """Delta as for averaging; T = n, so that each node contributes once on average."""
    return {"steps": graph.n, **_averaging_defaults(fields, graph)}


def _token_sum_summary(topology: Topology) -> SummaryRows:
    protocol = topology.protocol
    return [
        ("noisy contributions", len(protocol.noise_sigmas(topology.n))),
        ("std of the sum's noise", f"{protocol.sum_noise_std(topology.n):.6g}"),
    ]


def _histogram_defaults(fields: Fields, graph: GraphFacts) -> Fields:
    """γ given, or calibrated by PAbD Thm 2's proof for the run's --target-epsilon and --target-delta on this
    graph's n and the K cycles."""
    target = fields.get("target_epsilon"), fields.get("target_delta")
    if "gamma" in fields and target != (None, None):
        raise ConfigError("give --gamma or a target (--target-epsilon with --target-delta), not both")
    if "gamma" in fields:
        return fields
    if None in target:
        raise ConfigError("ring-histogram needs --gamma, or --target-epsilon with --target-delta for PAbD Thm 2")
    if "categories" not in fields:
        return fields  # the Params model names the missing --categories
    cycles = fields.get("cycles", _model_default(RingHistogramParams, "cycles"))
    return {**fields, "gamma": calibrate_gamma(graph.n, fields["categories"], *target, cycles)}


def _histogram_summary(topology: Topology) -> SummaryRows:
    """γ's ε₀ and, for a target, Thm 2's bound by its proof with the split and every condition it tests."""
    protocol = topology.protocol
    local = rr_epsilon(protocol.gamma, protocol.categories)
    rows: SummaryRows = [
        ("initial random elements ceil(gamma n)", initial_elements(protocol.gamma, topology.n)),
        ("eps0 of RR_gamma, ln(1 + L(1-gamma)/gamma)", f"{local:.6g}"),
    ]
    if protocol.target_epsilon is None:
        return rows
    bound = proof_bound(local, n=topology.n, cycles=protocol.cycles, delta=protocol.target_delta)
    factor = f"{bound.amplification:.4g}" + (" (>= 1: the shuffle amplifies nothing at this n)"
                                             if bound.amplification >= 1 else "")
    rows += [
        (f"Thm 2 by its proof: eps' of K = {protocol.cycles} windows at delta = {bound.delta:g}",
         f"{bound.epsilon:.6g} (target {protocol.target_epsilon:g})"),
        ("each window by Cor. 9: eps_w = 12 eps0 sqrt(ln(1/delta_w)/n)",
         f"{bound.window_epsilon:.6g} at delta_w = {bound.window_delta:.4g}, delta' = {bound.delta_prime:.4g}"),
        ("Cor. 9's factor 12 sqrt(ln(1/delta_w)/n)", factor),
        *((f"Cor. 9: {condition.name}", f"{'holds' if condition.holds else 'FAILS'} ({condition.detail})")
          for condition in corollary_conditions(topology.n, local, bound.window_delta)),
        ("Thm 2 as stated, same split (not used)",
         f"eps' = {bound.stated_epsilon:.6g}: its gamma formula swaps Cor. 9's eps0 and eps"),
    ]
    return rows


# netdp's own protocols' options, each named by its plug-in (node.protocols.*).
MUFFLIATO = ProtocolOptions(
    MuffliatoParams,
    NOISY_VECTOR_OPTIONS + (
        Option("--rounds", "rounds", "gossip rounds T (default: T_stop of Muffliato Thm 2 for the "
               "worst-case spread)", int),
        PLAIN,
    ),
    derive=_muffliato_defaults,
    summary=_muffliato_summary,
)

MUFFLIATO_ASYNC = ProtocolOptions(
    MuffliatoAsyncParams,
    NOISY_VECTOR_OPTIONS + (
        Option("--exchanges", "exchanges", "ticks of its own clock each node makes (or --duration)", int),
        Option("--duration", "duration_s", "seconds each node keeps ticking (or --exchanges)", float),
        TICK_RATE,
        Option("--activation", "activation", "how a ticking node picks its peer",
               choices=("weights", "uniform")),
        Option("--exchange-timeout", "exchange_timeout_s", "seconds to wait for a peer's answer", float),
    ),
    derive=_averaging_defaults,
)

GOSSIP_ROUNDS = Option("--gossip-rounds", "gossip_rounds", "gossip rounds K after every step", int)
MUFFLIATO_GD = ProtocolOptions(
    MuffliatoGDParams,
    NOISY_VECTOR_OPTIONS + (STEPS, GOSSIP_ROUNDS, PLAIN) + LEARNING_OPTIONS,
    derive=_gd_defaults,
)

# DECOR learning: Muffliato-GD's options (K defaults to the paper's 1), and the pairwise noise as `decor` sets it.
DECOR_GD = ProtocolOptions(
    DecorGDParams,
    NOISY_VECTOR_OPTIONS + (STEPS, GOSSIP_ROUNDS, Option("--sigma-cor-ratio", "sigma_cor_ratio", SIGMA_COR_DESCRIPTION,
                                                         float, default=1.0)) + LEARNING_OPTIONS,
    derive=_learning_defaults,
)

# Zip-DL learning: Muffliato-GD's learning options, one round per step (no --gossip-rounds).
ZERO_SUM_GD = ProtocolOptions(ZeroSumGDParams, NOISY_VECTOR_OPTIONS + (STEPS,) + LEARNING_OPTIONS,
                              derive=_learning_defaults)

# Secure-neighbourhood learning: Muffliato-GD's options, and the masks' ratio as `secure-neighbourhood` sets it.
SECURE_NEIGHBOURHOOD_GD = ProtocolOptions(
    SecureNeighbourhoodGDParams,
    NOISY_VECTOR_OPTIONS + (STEPS, GOSSIP_ROUNDS, Option("--mask-ratio", "mask_ratio", MASK_RATIO_DESCRIPTION, float,
                                                         default=10.0)) + LEARNING_OPTIONS,
    derive=_learning_defaults,
)

RING_SUM = ProtocolOptions(
    RingSumParams,
    NOISY_VECTOR_OPTIONS + (
        CYCLES,
        Option("--noise-placement", "noise_placement", "single: one contribution in n - 1 adds the noise "
               "(PAbD Alg. 1); distributed: every one adds N(0, sigma^2/n), the first N(0, sigma^2) (Remark 1)",
               choices=get_args(NoisePlacement)),
    ),
    derive=_averaging_defaults,
    summary=_token_sum_summary,
)

WALK_SUM = ProtocolOptions(
    WalkSumParams,
    NOISY_VECTOR_OPTIONS + (STEPS,),
    derive=_walk_defaults,
    summary=_token_sum_summary,
)

RW_SGD = ProtocolOptions(
    RwSgdParams,
    NOISY_VECTOR_OPTIONS + (
        STEPS,
        Option("--contribution-cap", "contribution_cap", "N_max: gradient steps a node takes at most; later "
               "visits of the model add noise only (ICML 2024 Remark 5; default: no cap)", int),
        Option("--sender", "sender", "known: a receiver learns which neighbour handed it the model (as the "
               "transport tells it); anonymous: it checks, then forgets it", choices=get_args(SenderView)),
    ) + LEARNING_OPTIONS,
    derive=_learning_defaults,
)

PERSONALIZED_CD = ProtocolOptions(
    PersonalizedCDParams,
    (
        DIMENSION,
        LEARNING_OPTIONS[0],  # --task
        Option("--mu", "mu", "mu: weight of the local losses against the graph term of objective (2)", float),
        Option("--lipschitz", "lipschitz", "L0: every example's loss gradient is clipped to l1 norm L0 (the Laplace "
               "noise of an update is 2 L0 / (eps m_i))", float),
        Option("--smoothness", "smoothness", "bound on the smoothness of every local data term (logistic on rows "
               "of l2 norm <= 1: 1/4)", float),
        Option("--max-examples", "max_examples", "m_max: an agent's confidence is c_i = min(1, m_i / m_max)", int),
        Option("--updates", "updates", "T_i: wake-ups of every agent, over which its budget is split", int),
        Option("--epsilon", "epsilon", "budget eps of every agent over the run (default: none, non-private CD)",
               float),
        Option("--delta", "delta", "budget delta of every agent (Thm 1's composition)", float),
        Option("--budget-split", "budget_split", "how an agent splits its budget over its updates: equally "
               "(default) or by Prop. 2 at the expected global iteration of each wake-up (needs "
               "--curvature-ratio)", choices=get_args(BudgetSplit)),
        Option("--curvature-ratio", "curvature_ratio", "sigma / L_max of objective (2), in (0, 1]: Prop. 2's "
               "C = 1 - ratio / n", float),
        Option("--warm-start-epsilon", "warm_start_epsilon", "eps of the private warm start: every agent first "
               "releases its noisy local model, paid from its budget, and starts from it (default: none)", float),
        Option("--warm-start-propagation", "warm_start_propagation", "P: wake-ups of model propagation (AISTATS "
               "2018 supplementary C) smoothing the released noisy local models over the graph before the updates; "
               "post-processing, it spends nothing (default: 0, needs --warm-start-epsilon)", int),
        TICK_RATE,
        ALPHA,
    ),
)

RING_HISTOGRAM = ProtocolOptions(
    RingHistogramParams,
    (
        Option("--categories", "categories", "L: every node's input is a category in 0..L-1", int),
        CYCLES,
        Option("--gamma", "gamma", "probability that randomized response RR_gamma replaces a node's answer by a "
               "uniform category (or a Thm 2 target)", float),
        Option("--target-epsilon", "target_epsilon", "epsilon of the whole run (K windows composed) for which "
               "PAbD Thm 2's proof calibrates gamma from n (with --target-delta)", float),
        Option("--target-delta", "target_delta", "delta of that target, below 1/100 (with --target-epsilon)",
               float),
        ALPHA,
    ),
    derive=_histogram_defaults,
    summary=_histogram_summary,
)


@cache
def registered_options() -> Mapping[str, ProtocolOptions]:
    """Every registered protocol's options by protocol name: those its plug-in names, else its Params' fields."""
    named = {name: load_attribute(plugin.options) for name, plugin in plugins().items() if plugin.options is not None}
    for name, protocol in named.items():
        if not isinstance(protocol, ProtocolOptions) or protocol.params is not protocol_spec(name).params:
            raise ConfigError(f"protocol {name!r} registers {plugins()[name].options}, which is not the "
                              "ProtocolOptions of its Params")
    defined = {option.flag: option for protocol in named.values() for option in protocol.options}
    return {name: named.get(name) or fields_as_options(plugin.spec.params, defined)
            for name, plugin in plugins().items()}


def fields_as_options(params: type[BaseModel], defined: Mapping[str, Option]) -> ProtocolOptions:
    """One option per field of `params` (but its `name`) that a command line can give; `defined`: the options
    other protocols define, by flag, which a field of the same name shares (one flag means one thing)."""
    options: list[Option] = []
    for field, info in params.model_fields.items():
        flag = "--" + field.replace("_", "-")
        if field in NOT_OPTIONS:
            continue
        shared = defined.get(flag)
        if shared is not None and shared.field != field:
            raise ConfigError(f"{params.__name__}.{field}: {flag} already sets another protocol's {shared.field}")
        option = shared or _field_option(flag, field, info)
        if option is not None:
            options.append(option)
    return ProtocolOptions(params, tuple(options))


def _field_option(flag: str, field: str, info: FieldInfo) -> Option | None:
    """The option that sets one field: a number or string, or a choice among a Literal's values; None: a field of
    another type, which keeps its default."""
    annotation = info.annotation
    if get_origin(annotation) in (Union, UnionType):  # `int | None`: the option sets the value, never None
        members = [member for member in get_args(annotation) if member is not NoneType]
        annotation = members[0] if len(members) == 1 else annotation
    help_text = info.description or field.replace("_", " ")
    if get_origin(annotation) is Literal:
        return Option(flag, field, help_text, choices=tuple(str(value) for value in get_args(annotation)))
    if annotation is bool:
        return Option(flag, field, f"{help_text} (true or false)", _truth)
    if annotation in (int, float, str):
        return Option(flag, field, help_text, annotation)
    return None


def _truth(text: str) -> bool:
    if text not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text == "true"


def add_protocol_options(parser: argparse.ArgumentParser) -> None:
    """--protocol and every protocol's options; an option shared by several protocols is added once."""
    parser.add_argument("--protocol", choices=list(registered_options()), default=DEFAULT_PROTOCOL,
                        help="protocol the nodes run (default %(default)s); each takes the options marked with it")
    for option, names in _options_by_flag().items():
        kwargs: dict[str, Any] = (
            {"action": "store_const", "const": option.sets} if option.sets is not None
            else {"type": option.type, "choices": option.choices}
        )
        parser.add_argument(option.flag, dest=option.dest, default=None,
                            help=f"[{', '.join(names)}] {option.help}{_default_text(option)}", **kwargs)


def protocol_params(args: argparse.Namespace, graph: GraphFacts) -> BaseModel:
    """The Params of --protocol from its options, refusing options of other protocols and graphs it cannot run on."""
    name = args.protocol
    protocol = registered_options()[name]
    foreign = [option.flag for option in _options_by_flag()
               if option not in protocol.options and getattr(args, option.dest) is not None]
    if foreign:
        takes = " ".join(option.flag for option in protocol.options)
        raise ConfigError(f"{foreign[0]} is not an option of protocol {name} (it takes {takes})")
    given = {option.field: getattr(args, option.dest) for option in protocol.options}
    return params_from_fields(name, {field: value for field, value in given.items() if value is not None}, graph)


def params_from_fields(name: str, fields: Fields, graph: GraphFacts) -> BaseModel:
    """Protocol `name`'s Params from the fields given (Params field names; the Python API calls this directly),
    with the command line's defaults and the derived ones (T_stop, Delta from the clip, ...) for those left out.

    A field the protocol does not have is refused by its Params model (pydantic's ValidationError).
    """
    options = registered_options()
    if name not in options:
        raise ConfigError(f"unknown protocol {name!r}; choose one of {', '.join(options)}")
    protocol = options[name]
    fields = {**{option.field: option.default for option in protocol.options if option.default is not None},
              **fields}
    shapes = protocol_spec(name).graphs
    if graph.shape not in shapes:  # the topology would refuse it too, but only after defaults needing a fixed graph
        raise ConfigError(f"protocol {name} runs on {' or '.join(sorted(shapes))} graphs; this graph is "
                          f"{graph.shape.replace('_', '-')} (--schedule {graph.schedule.kind})")
    return protocol.params.model_validate(protocol.derive(fields, graph))


def summary_rows(topology: Topology) -> SummaryRows:
    """The protocol's published fields (those set), then the rows its entry adds."""
    protocol = topology.protocol
    fields = protocol.model_dump(exclude_none=True)
    rows: SummaryRows = [("protocol", fields.pop("name"))]
    rows += list(fields.items())
    return rows + registered_options()[protocol.name].summary(topology)


def _options_by_flag() -> dict[Option, list[str]]:
    """Every option once, with the protocols that take it; one flag must mean one thing everywhere."""
    names: dict[Option, list[str]] = {}
    flags: dict[str, Option] = {}
    for name, protocol in registered_options().items():
        for option in protocol.options:
            if flags.setdefault(option.flag, option) != option:  # equal options (one field, help, default) are one
                raise AssertionError(f"{option.flag} is defined twice, differently")
            names.setdefault(option, []).append(name)
    return names


def _default_text(option: Option) -> str:
    """' (default X)' for an option that takes a value: the command line's default, else the Params models' own."""
    if option.sets is not None:
        return ""
    if option.default is not None:
        return f" (default {option.default})"
    defaults = {_model_default(protocol.params, option.field)
                for protocol in registered_options().values() if option in protocol.options}
    default = defaults.pop() if len(defaults) == 1 else None
    return "" if default is None else f" (default {default})"


def _model_default(params: type[BaseModel], field: str) -> Any:
    default = params.model_fields[field].default
    return None if default is PydanticUndefined else default

