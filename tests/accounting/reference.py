"""Test references for the accountants: graphs as topologies, and straightforward dense versions.

The dense versions follow the definitions literally (dense W_t, dense products, one message
and one observer at a time, a pseudo-inverse for the projection); the product code must agree
with them, and the benchmark times the product against them.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.topology.build import build_topology
from node.protocols.muffliato import MuffliatoParams
from node.topology import Topology


def topology_from_graph(
    graph: nx.Graph,
    *,
    rounds: int,
    accelerated: bool,
    weighting: str = "metropolis",
    sigma: float = 1.0,
    sensitivity: float = 1.0,
    alpha: float = 2.0,
) -> Topology:
    """A published topology for `graph`, its nodes relabelled 0..n-1 in sorted order."""
    graph = nx.convert_node_labels_to_integers(graph, ordering="sorted")
    protocol = MuffliatoParams(
        sigma=sigma, sensitivity=sensitivity, alpha=alpha, rounds=rounds, accelerated=accelerated, dimension=1
    )
    return build_topology(graph, graph_name="test", run_id="accounting-test", protocol=protocol, weighting=weighting)


def drop(transcript: Transcript, node: int, peer: int, round_index: int) -> Transcript:
    """The same run, except that `node` did not get x_peer^round in time and mixed without it."""
    used = [list(rounds) for rounds in transcript.used]
    used[node][round_index] = used[node][round_index] - {peer}
    received = [list(messages) for messages in transcript.received]
    received[node].remove((peer, round_index))
    return replace(
        transcript,
        used=tuple(tuple(rounds) for rounds in used),
        received=tuple(tuple(messages) for messages in received),
    )


def dense_realized(transcript: Transcript, t: int) -> np.ndarray:
    """W_t as a dense matrix: realized rows, identity rows for nodes that had stopped."""
    matrix = np.eye(transcript.n)
    for v in range(transcript.n):
        if t < transcript.completed_rounds(v):
            matrix[v] = 0.0
            for w, weight in transcript.realized_row(v, t).items():
                matrix[v, w] = weight
    return matrix


def dense_rows(transcript: Transcript, *, accelerated: bool) -> list[np.ndarray]:
    """C^0..C^{T-1} by dense products: C^{t+1} = W_t C^t, or (1-ω) C^{t-1} + ω W_t C^t for t >= 1."""
    omega = transcript.omega
    rows = [np.eye(transcript.n)]
    for t in range(transcript.rounds - 1):
        mixed = dense_realized(transcript, t) @ rows[-1]
        rows.append(mixed if t == 0 or not accelerated else (1 - omega) * rows[-2] + omega * mixed)
    return rows


def dense_paper_sum(transcript: Transcript) -> np.ndarray:
    """Thm 1's sum [u, v] over v's received messages (w, t) of (W_{0:t})²_{w,u} / ‖(W_{0:t})_w‖², all u."""
    products = dense_rows(transcript, accelerated=False)
    total = np.zeros((transcript.n, transcript.n))
    for v in range(transcript.n):
        for w, t in set(transcript.received[v]):
            row = products[t][w]
            total[:, v] += row**2 / np.dot(row, row)
    return total


def dense_geometry(transcript: Transcript, *, own_noise_known: bool = True) -> np.ndarray:
    """p = ‖Π_v e_u‖² [u, v] from diag(K⁺ K) of each observer's stacked rows (NaN on the diagonal)."""
    rows = dense_rows(transcript, accelerated=transcript.accelerated)
    n = transcript.n
    geometry = np.full((n, n), np.nan)
    for v in range(n):
        hidden = [k for k in range(n) if k != v or not own_noise_known]
        stacked = np.array([rows[t][w, hidden] for w, t in sorted(set(transcript.received[v]))])
        projection = np.diag(np.linalg.pinv(stacked) @ stacked)
        for i, u in enumerate(hidden):
            if u != v:
                geometry[u, v] = projection[i]
    return geometry


# --- randomized gossip: dense single-edge products ---------------------------------------------

AsyncExchange = tuple[int, int, bool, bool]  # (initiator, responder, initiator applied, responder applied)


def dense_async_rows(n: int, exchanges: list[AsyncExchange]) -> list[np.ndarray]:
    """C before every exchange (in time order): products of W = I − (e_a − e_b)(e_a − e_b)ᵀ/2, one-sided
    rows for a side that did not apply it."""
    rows, current = [], np.eye(n)
    for a, b, a_applied, b_applied in exchanges:
        rows.append(current)
        step = np.eye(n)
        for node, applied in ((a, a_applied), (b, b_applied)):
            if applied:
                step[node] = 0.0
                step[node, [a, b]] = 0.5
        current = step @ current
    return rows


def dense_async_geometry(n: int, exchanges: list[AsyncExchange], views: list[list[tuple[int, int]]], *,
                         own_noise_known: bool = True) -> np.ndarray:
    """p [u, v] from diag(K⁺ K) of each observer's stacked rows; views[v] lists (sender, exchange position)."""
    rows = dense_async_rows(n, exchanges)
    geometry = np.full((n, n), np.nan)
    for v in range(n):
        hidden = [k for k in range(n) if k != v or not own_noise_known]
        stacked = np.array([rows[k][s, hidden] for s, k in sorted(set(views[v]))]).reshape(-1, len(hidden))
        projection = np.diag(np.linalg.pinv(stacked) @ stacked) if stacked.size else np.zeros(len(hidden))
        for i, u in enumerate(hidden):
            if u != v:
                geometry[u, v] = projection[i]
    return geometry


def dense_async_paper(n: int, exchanges: list[AsyncExchange], views: list[list[tuple[int, int]]]) -> np.ndarray:
    """Thm 1's sum [u, v] over v's received values of (row)²_u / ‖row‖², each row a realized product."""
    rows = dense_async_rows(n, exchanges)
    total = np.zeros((n, n))
    for v in range(n):
        for s, k in set(views[v]):
            row = rows[k][s]
            total[:, v] += row**2 / np.dot(row, row)
    np.fill_diagonal(total, np.nan)
    return total


def gaussian_eps(mu: float, delta: float) -> float:
    """The ε at δ of a μ-Gaussian mechanism, by bisection of its privacy profile
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018)."""
    def profile(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(profile, 0.0, mu * mu / 2 + mu * np.sqrt(2 * np.log(1 / delta)) + 1, xtol=1e-14, rtol=1e-12)
