"""Seeded, deterministic graph generators for published topologies.

Every generator returns a connected, undirected ``networkx.Graph`` on nodes 0..n-1 without
edge data: weights are chosen later (see ``build.py``), so a generator only fixes who talks to
whom. Random generators take a public integer seed and draw from one ``random.Random(seed)``
stream, resampling until the graph is connected, so the same seed always gives the same graph.
Impossible parameters raise ``ValueError`` with a message meant for the user.
"""

from __future__ import annotations

import inspect
import math
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx

MAX_DRAWS = 1000
SEED_BITS = 31  # fresh public seeds are drawn in 0..2^31 - 1


def ring(n: int) -> nx.Graph:
    """Ring (cycle): 0 - 1 - ... - (n-1) - 0."""
    _require_n(n, minimum=3)
    return nx.cycle_graph(n)


def complete(n: int) -> nx.Graph:
    """Complete graph: every pair of nodes is an edge."""
    _require_n(n, minimum=2)
    return nx.complete_graph(n)


def star(n: int) -> nx.Graph:
    """Star: node 0 is the hub, nodes 1..n-1 are leaves."""
    _require_n(n, minimum=2)
    return nx.star_graph(n - 1)


def grid(n: int | None = None, rows: int | None = None, cols: int | None = None) -> nx.Graph:
    """2-D grid (n a perfect square, or rows x cols); node r*cols + c sits at row r, column c."""
    rows, cols = _grid_shape(n, rows, cols, minimum_side=2)
    return _integer_labels(nx.grid_2d_graph(rows, cols))


def torus(n: int | None = None, rows: int | None = None, cols: int | None = None) -> nx.Graph:
    """2-D torus: a grid whose rows and columns wrap around, so every node has degree 4."""
    rows, cols = _grid_shape(n, rows, cols, minimum_side=3)
    return _integer_labels(nx.grid_2d_graph(rows, cols, periodic=True))


def hypercube(n: int) -> nx.Graph:
    """Hypercube: i ~ i xor 2^k, the papers' "exponential graph"; n must be a power of 2."""
    _require_n(n, minimum=2)
    if n & (n - 1):
        raise ValueError(f"hypercube needs n a power of 2, got n = {n}")
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((i, i ^ bit) for i in range(n) for bit in _powers_of_two_below(n) if i < i ^ bit)
    return graph


def exponential(n: int) -> nx.Graph:
    """Exponential circulant: i ~ i +- 2^k (mod n) for every 2^k < n."""
    _require_n(n, minimum=2)
    return nx.circulant_graph(n, _powers_of_two_below(n))


def erdos_renyi(n: int, seed: int, c: float = 2.0) -> nx.Graph:
    """Erdos-Renyi G(n, p) with p = c ln(n) / n, redrawn until connected (c > 1 makes that likely)."""
    _require_n(n, minimum=2)
    if c <= 0:
        raise ValueError(f"erdos_renyi needs c > 0, got c = {c}")
    p = c * math.log(n) / n
    if p > 1:
        raise ValueError(f"erdos_renyi edge probability c ln(n)/n = {p:.3g} exceeds 1; lower c or use 'complete'")
    return _connected_draw(
        lambda rng: nx.gnp_random_graph(n, p, seed=rng), seed, f"erdos_renyi with p = {p:.3g}", "raise c"
    )


def random_geometric(n: int, seed: int, radius: float | None = None) -> nx.Graph:
    """Random geometric: nodes uniform in the unit square, linked when closer than radius; redrawn until connected.

    The default radius is sqrt(2 ln(n) / (pi n)), twice the connectivity threshold's area,
    which keeps redraws rare. Node positions are kept in the node attribute 'pos'.
    """
    _require_n(n, minimum=2)
    if radius is None:
        radius = math.sqrt(2.0 * math.log(n) / (math.pi * n))
    if radius <= 0:
        raise ValueError(f"random_geometric needs radius > 0, got radius = {radius}")
    return _connected_draw(
        lambda rng: nx.random_geometric_graph(n, radius, seed=rng),
        seed,
        f"random_geometric with radius {radius:.3g}",
        "raise radius",
    )


def stochastic_block_model(
    n: int, seed: int, blocks: int = 2, p_in: float = 0.5, p_out: float = 0.05
) -> nx.Graph:
    """Stochastic block model: near-equal blocks linked with p_in inside, p_out across; redrawn until connected.

    The first n mod blocks blocks take one node more. Each node's block is kept in the node
    attribute 'block'.
    """
    _require_n(n, minimum=2)
    if not 1 <= blocks <= n:
        raise ValueError(f"stochastic_block_model needs 1 <= blocks <= n = {n}, got blocks = {blocks}")
    for name, p in (("p_in", p_in), ("p_out", p_out)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"stochastic_block_model needs 0 <= {name} <= 1, got {name} = {p}")
    if blocks > 1 and p_out == 0.0:
        raise ValueError("stochastic_block_model with p_out = 0 and several blocks is never connected")
    sizes = [n // blocks + (1 if b < n % blocks else 0) for b in range(blocks)]
    probabilities = [[p_in if a == b else p_out for b in range(blocks)] for a in range(blocks)]
    return _connected_draw(
        lambda rng: nx.stochastic_block_model(sizes, probabilities, seed=rng),
        seed,
        f"stochastic_block_model with p_in = {p_in}, p_out = {p_out}",
        "raise p_in or p_out",
    )


def davis_southern_women() -> nx.Graph:
    """Davis' Southern Women: 18 women and the 14 events they attended (bipartite, 32 nodes)."""
    return _integer_labels(nx.davis_southern_women_graph())


def karate_club() -> nx.Graph:
    """Zachary's karate club (34 nodes)."""
    return _integer_labels(nx.karate_club_graph())


def florentine_families() -> nx.Graph:
    """Padgett's Florentine families, marriage ties (15 nodes)."""
    return _integer_labels(nx.florentine_families_graph())


@dataclass(frozen=True)
class GraphKind:
    """A generator plus what the CLI needs to list it and check the parameters it was given."""

    build: Callable[..., nx.Graph]

    @property
    def summary(self) -> str:
        return inspect.getdoc(self.build).splitlines()[0]

    @property
    def parameters(self) -> dict[str, inspect.Parameter]:
        return dict(inspect.signature(self.build).parameters)

    @property
    def seeded(self) -> bool:
        return "seed" in self.parameters


GENERATORS: dict[str, GraphKind] = {
    build.__name__: GraphKind(build)
    for build in (
        ring,
        complete,
        grid,
        torus,
        hypercube,
        exponential,
        erdos_renyi,
        random_geometric,
        star,
        stochastic_block_model,
        davis_southern_women,
        karate_club,
        florentine_families,
    )
}


def generate(kind: str, **parameters: object) -> nx.Graph:
    """Run the generator `kind` with the parameters that are not None.

    A parameter the kind does not take, or a required one that is missing, is a ValueError
    naming it, so a stray command-line option is reported rather than silently ignored.
    """
    if kind not in GENERATORS:
        raise ValueError(f"unknown graph kind {kind!r}; choose one of {', '.join(GENERATORS)}")
    accepted = GENERATORS[kind].parameters
    given = {name: value for name, value in parameters.items() if value is not None}
    stray = sorted(set(given) - set(accepted))
    if stray:
        takes = ", ".join(accepted) or "no parameters"
        raise ValueError(f"{kind} does not take {', '.join(stray)} (it takes {takes})")
    missing = [
        name
        for name, parameter in accepted.items()
        if parameter.default is inspect.Parameter.empty and name not in given
    ]
    if missing:
        raise ValueError(f"{kind} needs {', '.join(missing)}")
    return GENERATORS[kind].build(**given)


def public_seed(kind: str, seed: int | None) -> int | None:
    """The seed a random kind is drawn with: the one given, or a fresh one, recorded in the topology so the
    graph can be drawn again; None for a deterministic kind given none."""
    if seed is None and kind in GENERATORS and GENERATORS[kind].seeded:
        return secrets.randbits(SEED_BITS)
    return seed


def _require_n(n: int, *, minimum: int) -> None:
    if n < minimum:
        raise ValueError(f"need n >= {minimum} nodes, got n = {n}")


def _powers_of_two_below(n: int) -> list[int]:
    """The hop lengths 1, 2, 4, ... below n."""
    return [1 << k for k in range((n - 1).bit_length())]


def _grid_shape(n: int | None, rows: int | None, cols: int | None, *, minimum_side: int) -> tuple[int, int]:
    """(rows, cols) from both sides, or from n when n is a perfect square."""
    if (rows is None) != (cols is None):
        raise ValueError("give both rows and cols, or only n (a perfect square)")
    if rows is None:
        if n is None:
            raise ValueError("a grid needs n (a perfect square) or rows and cols")
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(f"n = {n} is not a perfect square; give rows and cols instead")
        rows = cols = side
    elif n is not None and n != rows * cols:
        raise ValueError(f"n = {n} does not match rows x cols = {rows * cols}")
    if min(rows, cols) < minimum_side:
        raise ValueError(f"each side needs at least {minimum_side} nodes, got {rows} x {cols}")
    return rows, cols


def _integer_labels(graph: nx.Graph) -> nx.Graph:
    """Nodes relabelled 0..n-1 in sorted order of their original labels (kept as 'name'), edge data dropped."""
    labelled = nx.convert_node_labels_to_integers(graph, ordering="sorted", label_attribute="name")
    plain = nx.Graph()
    plain.add_nodes_from(labelled.nodes(data=True))
    plain.add_edges_from(labelled.edges())
    return plain


def _connected_draw(draw: Callable[[random.Random], nx.Graph], seed: int, what: str, hint: str) -> nx.Graph:
    """First connected graph drawn from the stream random.Random(seed)."""
    rng = random.Random(seed)
    for _ in range(MAX_DRAWS):
        graph = draw(rng)
        if nx.is_connected(graph):
            return graph
    raise ValueError(f"{what}: no connected graph in {MAX_DRAWS} draws; {hint}")
