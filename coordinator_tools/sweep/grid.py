"""The sweep's grid: what `netdp sweep` varies, checked before any run, and its expansion into points.

The points are the Cartesian product protocol × graph × n × T × noise. T is the averaging
protocols' length (muffliato: synchronous rounds, default T_stop of Muffliato Thm 2; muffliato-async:
ticks of each node's clock) and the learning protocol's gradient steps; the noise is σ, or a target
mean ε at δ for which the planner calibrates σ per point. A graph kind that fixes its own size
(karate_club, ...) ignores n. Seeds come from the base seed: the graph's from (graph, n), the data's
and the noise's from (protocol family, n), the attack's from the point's id. Every point of one
curve runs on the same graph and data, and every point of one size n draws the same standard
normal noise scaled by its σ (the simulation sampler draws σ·z): common random numbers, so that
curves differ by protocol, graph, T and σ, not by the luck of the draws.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import networkx as nx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from coordinator_tools.audit.run_audit import DEFAULT_DELTA
from coordinator_tools.dataprep.datasets import SEED_BITS
from coordinator_tools.topology.generators import GENERATORS, generate
from node.errors import ConfigError
from node.protocols.base import SweepShape
from node.protocols.registry import protocol_spec, protocol_specs

DEFAULT_STEPS = 10
AXES = ("protocol", "graph", "n", "sigma", "target_eps", "rounds", "steps")  # the grid's list-valued fields

Size = Annotated[int, Field(ge=2)]
Length = Annotated[int, Field(ge=1)]
Noise = Annotated[float, Field(gt=0.0)]


def sweep_shapes() -> dict[str, SweepShape]:
    """How `netdp sweep` varies each registered protocol it can run, by protocol name."""
    return {spec.name: spec.sweep for spec in protocol_specs() if spec.sweep is not None}


def supported(family: str | None = None) -> tuple[str, ...]:
    """The protocols `netdp sweep` runs (of one family: "averaging" or "learning")."""
    return tuple(name for name, shape in sweep_shapes().items() if family in (None, shape.family))


def length_field(protocol: str) -> str:
    """The Params field that is a sweep point's T for `protocol`."""
    return sweep_shapes()[protocol].length_field


def _length_description(protocol: str) -> str:
    params = protocol_spec(protocol).params
    return params.model_fields[length_field(protocol)].description or length_field(protocol)


class SweepGrid(BaseModel):
    """The grid as given (command-line options or a --grid JSON file with the same field names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: tuple[str, ...] = Field(min_length=1, description="protocols to run (`supported()`)")
    graph: tuple[str, ...] = Field(("hypercube",), min_length=1, description="graph kinds")
    n: tuple[Size, ...] = Field((16,), min_length=1, description="numbers of nodes (graph kinds that take n)")
    sigma: tuple[Noise, ...] | None = Field(None, min_length=1, description="noise std per draw")
    target_eps: tuple[Noise, ...] | None = Field(None, min_length=1, description="or: target mean eps at delta")
    delta: float = Field(DEFAULT_DELTA, gt=0.0, lt=1.0, description="delta of every eps")
    rounds: tuple[Length, ...] | None = Field(None, min_length=1, description="T of the averaging protocols")
    steps: tuple[Length, ...] | None = Field(None, min_length=1, description="gradient steps of muffliato-gd")
    dimension: int = Field(1, ge=1, description="length of every node's vector (averaging)")
    dataset: Literal["breast_cancer", "digits"] = Field("breast_cancer", description="learning points' data")
    seed: int = Field(0, ge=0, description="base seed every point's seeds derive from")
    networked: bool = Field(False, description="real node processes on loopback instead of virtual runs")
    insecure: bool = Field(False, description="networked runs in plain text instead of mutual TLS")

    @field_validator(*AXES, mode="before")
    @classmethod
    def _listed(cls, value: object) -> object:
        """A single value is a list of one (handy in a grid file)."""
        return [value] if isinstance(value, str | int | float) and not isinstance(value, bool) else value

    @field_validator(*AXES)
    @classmethod
    def _distinct(cls, values: tuple | None) -> tuple | None:
        if values is not None and len(set(values)) != len(values):
            repeated = next(value for value in values if values.count(value) > 1)
            raise ValueError(f"lists {repeated} twice")
        return values

    @field_validator("protocol")
    @classmethod
    def _supported(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        unsupported = [name for name in values if name not in sweep_shapes()]
        if unsupported:
            raise ValueError(f"netdp sweep runs {', '.join(supported())}; not {unsupported[0]!r}")
        return values

    @field_validator("graph")
    @classmethod
    def _known_graphs(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in values if name not in GENERATORS]
        if unknown:
            raise ValueError(f"unknown graph kind {unknown[0]!r}; choose among {', '.join(GENERATORS)}")
        return values

    @model_validator(mode="after")
    def _consistent(self) -> SweepGrid:
        if (self.sigma is None) == (self.target_eps is None):
            raise ValueError("give sigma or target_eps (--sigma or --target-eps), exactly one of them")
        averaging, learning = supported("averaging"), supported("learning")
        if self.rounds is not None and not any(name in averaging for name in self.protocol):
            raise ValueError(f"rounds is T of {', '.join(averaging)}; {', '.join(learning)} "
                             f"take{'s' if len(learning) == 1 else ''} steps")
        if self.steps is not None and not any(name in learning for name in self.protocol):
            raise ValueError(f"steps is T of {', '.join(learning)}; the averaging protocols take rounds")
        for name in self.protocol:
            if sweep_shapes()[name].length_required and self.rounds is None:
                raise ValueError(f"{name} needs rounds (--rounds): {_length_description(name)}")
        if self.insecure and not self.networked:
            raise ValueError("insecure only goes with networked runs (--networked)")
        return self

    def lengths(self, protocol: str) -> tuple[int | None, ...]:
        """The T axis of `protocol`: its rounds or steps (None: muffliato's T_stop)."""
        if sweep_shapes()[protocol].family == "learning":
            return self.steps or (DEFAULT_STEPS,)
        return self.rounds or (None,)

    def noise(self) -> tuple[tuple[float | None, float | None], ...]:
        """The noise axis as (sigma, target_eps) pairs, one of them None."""
        if self.sigma is not None:
            return tuple((sigma, None) for sigma in self.sigma)
        return tuple((None, target) for target in self.target_eps)


@dataclass(frozen=True)
class Point:
    """One point of the grid with every seed it uses (graph_seed None: a deterministic graph kind)."""

    id: str
    protocol: str
    graph: str
    n: int
    length: int | None  # T; None: muffliato's T_stop at the point's sigma
    sigma: float | None
    target_eps: float | None
    graph_seed: int | None
    data_seed: int
    noise_seed: int
    attack_seed: int

    @property
    def learning(self) -> bool:
        return sweep_shapes()[self.protocol].family == "learning"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def grid_from(fields: dict[str, object], source: str) -> SweepGrid:
    """The grid from its fields, or a one-line ConfigError naming the first problem and where it came from."""
    try:
        return SweepGrid.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] != "value_error" and isinstance(error.get("input"), str | int | float):
            message += f", got {error['input']!r}"
        raise ConfigError(f"{source}: {where + ': ' if where else ''}{message}") from None


def load_grid(path: Path) -> SweepGrid:
    """A --grid JSON file: an object with SweepGrid's fields."""
    try:
        fields = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read grid file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"grid file {path} is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise ConfigError(f"grid file {path} must hold a JSON object with the grid's fields")
    return grid_from(fields, str(path))


def derived_seed(base: int, *parts: object) -> int:
    """A seed of SEED_BITS bits from the base seed and what it is for: stable across runs and machines."""
    digest = hashlib.sha256(json.dumps([base, *parts]).encode()).digest()
    return int.from_bytes(digest[:8], "big") % (1 << SEED_BITS)


def expand(grid: SweepGrid) -> list[Point]:
    """Every point of the grid, in a fixed order."""
    points: list[Point] = []
    for protocol in grid.protocol:
        family = sweep_shapes()[protocol].family
        for graph in grid.graph:
            for n in graph_sizes(graph, grid.n):
                graph_seed = graph_seed_of(grid.seed, graph, n)
                for length in grid.lengths(protocol):
                    for sigma, target in grid.noise():
                        noise = f"sigma{sigma:g}" if sigma is not None else f"eps{target:g}"
                        point_id = f"{protocol}_{graph}_n{n}_T{'stop' if length is None else length}_{noise}"
                        points.append(Point(
                            id=point_id, protocol=protocol, graph=graph, n=n, length=length, sigma=sigma,
                            target_eps=target, graph_seed=graph_seed,
                            data_seed=derived_seed(grid.seed, "data", family, n),
                            noise_seed=derived_seed(grid.seed, "noise", family, n),
                            attack_seed=derived_seed(grid.seed, "attack", point_id)))
    return points


def graph_seed_of(base: int, graph: str, n: int) -> int | None:
    """The seed a random graph kind is drawn with at size n (None for a deterministic kind)."""
    return derived_seed(base, "graph", graph, n) if GENERATORS[graph].seeded else None


def graph_sizes(graph: str, sizes: tuple[int, ...]) -> list[int]:
    """The n a graph kind is swept at: the sizes given, or its own fixed size for a kind that takes no n."""
    return list(sizes) if "n" in GENERATORS[graph].parameters else [generate(graph).number_of_nodes()]


def point_graph(point: Point) -> nx.Graph:
    """The point's graph, drawn as its seeds say; a size the kind cannot have is a ConfigError."""
    takes = GENERATORS[point.graph].parameters
    try:
        return generate(point.graph, n=point.n if "n" in takes else None, seed=point.graph_seed)
    except ValueError as exc:
        raise ConfigError(f"graph {point.graph} with n = {point.n}: {exc}") from None
