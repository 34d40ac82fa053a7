"""What an averaging run bought with its privacy: how close the nodes' final estimates came to the true mean.

The truth is the mean x̄ of the clipped inputs, from the run's data folder (`--data`, clipped as
the nodes clip) or from the private logs (`--with-private-logs`, which hold the clipped inputs).
The run's MSE is (1/|S|) Σ_{v ∈ S} ‖x_v^T − x̄‖² / D over the nodes S that logged an output, per
coordinate, beside:
* Muffliato's bound at the same σ: Thm 2, 3σ²/n (synchronous, once T ≥ T_stop), or Thm 3, 4σ²/n
  (randomized, past its T_stop), both per coordinate (`coordinator_tools.theory`);
* central: a trusted aggregator that releases the mean with everyone's noise, σ²/n expected
  (what perfect averaging of the noisy inputs gives);
* local DP: every node keeps its own noisy input, σ² plus the inputs' spread (1/n) Σ_v ‖x_v − x̄‖² / D
  expected.
Without data or private logs the truth is unknown, and structure-only logs hold no output: the
block says so and keeps the bounds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.theory import muffliato_mse_bound, muffliato_t_stop, randomized_muffliato_mse_bound
from node.data import clip_to_ball, node_data_file
from node.protocols.muffliato import PROTOCOL_NAME as SYNCHRONOUS
from node.protocols.registry import protocol_spec

NO_TRUTH = "no data: pass --data (the run's data folder) or --with-private-logs to compare with the true mean"
NO_OUTPUTS = "structure-only logs: the nodes' final outputs were stripped"


def averaging_utility(replay: Replay, data_dir: Path | None, *, muffliato_bound: bool = True) -> dict[str, object]:
    """The report's `utility` block of an averaging run (muffliato, muffliato-async; without `muffliato_bound`,
    a plug-in's averaging: no bound and no T_stop beside its MSE)."""
    topology = replay.topology
    params = topology.protocol
    n, sigma = topology.n, params.sigma
    synchronous = muffliato_bound and replay.auditor.name == SYNCHRONOUS
    block: dict[str, object] = {
        "metric": "mse",
        "per": "coordinate",
        "bound": (None if not muffliato_bound else muffliato_mse_bound(n, sigma) if synchronous
                  else randomized_muffliato_mse_bound(n, sigma)),
        "bound_rule": (None if not muffliato_bound else "Thm 2: 3σ²/n, once T ≥ T_stop" if synchronous
                       else "Thm 3: 4σ²/n, past T_stop edge activations"),
        "central": sigma**2 / n,
        "rounds": getattr(params, "rounds", None),
    }
    inputs, source = _clipped_inputs(replay, data_dir)
    outputs = replay.final_estimates
    if replay.payloads_stripped or inputs is None or not outputs:
        reason = (NO_OUTPUTS if replay.payloads_stripped else NO_TRUTH if inputs is None
                  else "no node logged a final output")
        return {**block, "mse": None, "local": None, "t_stop": None, "nodes_scored": len(outputs), "truth": None,
                "reason": reason}
    mean = inputs.mean(axis=0)
    spread = float(np.mean(np.sum((inputs - mean) ** 2, axis=1)))
    errors = [float(np.mean((value - mean) ** 2)) for value in outputs.values()]
    t_stop = None
    if synchronous and sigma > 0 and topology.spectral_gap is not None:
        t_stop = muffliato_t_stop(n, topology.spectral_gap, sigma, spread, params.accelerated)
    return {**block, "mse": float(np.mean(errors)), "local": sigma**2 + spread / params.dimension, "t_stop": t_stop,
            "nodes_scored": len(errors), "truth": source, "reason": None}


def _clipped_inputs(replay: Replay, data_dir: Path | None) -> tuple[np.ndarray | None, str | None]:
    """Every node's clipped input (n × D) and where it came from, or (None, None) when unknown."""
    topology = replay.topology
    radius = topology.protocol.sensitivity / 2.0
    if data_dir is not None:
        load = protocol_spec(topology.protocol.name).load
        values = [clip_to_ball(load(node_data_file(data_dir, v), topology.protocol), radius)[0]
                  for v in range(topology.n)]
        return np.array(values), "data"
    private = replay.private
    if private is not None and len(private.inputs) == topology.n:
        return np.array([private.inputs[v][: topology.protocol.dimension] for v in range(topology.n)]), "private logs"
    return None, None
