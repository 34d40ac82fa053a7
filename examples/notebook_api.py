# %% [markdown]
# # netdp from Python
#
# Build a 16-node hypercube, run synchronous Muffliato on it (virtually: every node in this
# process, the same node code and logs as a networked run), audit what each node leaked to each
# other node, and set the run against the plan made before it. Run it as a script
# (`.venv/bin/python examples/notebook_api.py`) or open it as a notebook (the `# %%` cells).
# It writes everything into a new folder `netdp-example-*` of the working directory.

# %%
import tempfile
from pathlib import Path

import pandas as pd

from coordinator_tools import api
from coordinator_tools.theory import muffliato_mse_bound

WORK = Path(tempfile.mkdtemp(prefix="netdp-example-", dir="."))
SIGMA, DIMENSION = 1.0, 16
pd.set_option("display.width", 160)

# %% [markdown]
# ## The topology every node loads
# Metropolis-Hastings weights, Chebyshev-accelerated gossip for Muffliato's T_stop rounds.

# %%
topo = api.topology("hypercube", 16, sigma=SIGMA, dimension=DIMENSION, run_id="notebook-example")
api.save_topology(topo, WORK / "topology.json")  # the file `netdp run` and `netdp-node` read
print(f"{topo.n} nodes, {topo.protocol.rounds} rounds, spectral gap {topo.spectral_gap:.3f}")

# %% [markdown]
# ## Synthetic data, and the run
# `seed` picks the seeded simulation sampler so that the notebook gives the same numbers every time.

# %%
values = api.synthetic_data(topo, seed=0)
data = api.write_data(values, WORK / "data")
run = api.run(topo, data, WORK / "run", seed=1).check()
print(run.estimates.head())

# %% [markdown]
# How far the nodes' estimates are from the true mean, against Muffliato Thm 2's bound
# on the mean squared error per coordinate, 3σ²/n.

# %%
mse = float(((run.estimates.to_numpy() - values.mean(axis=0)) ** 2).mean())
mse_bound = muffliato_mse_bound(topo.n, SIGMA)
print(f"MSE per coordinate {mse:.4f}; Thm 2 bound {mse_bound:.4f}")

# %% [markdown]
# ## The audit: every ordered pair source -> observer

# %%
audit = api.audit(run, attack_seed=0)
print(audit.checks[["name", "level"]])

# %%
COLUMNS = ["source", "observer", "hop_distance", "exact_eps_upper", "paper_eps", "model_attack_eps_lower", "ldp_eps"]
worst_pairs = audit.pairs.nlargest(5, "exact_eps_upper")[COLUMNS]
print(worst_pairs)

# %% [markdown]
# Mean ε per observer (each observer's loss averaged over the sources), and by hop distance. At
# T_stop most observers of a hypercube can solve for a source's noisy input (exact = local DP):
# fewer rounds, or more noise, is what buys privacy from the decentralization.

# %%
eps_per_observer = audit.pairs.groupby("observer")[["exact_eps_upper", "paper_eps", "ldp_eps"]].mean()
print(eps_per_observer.sort_values("exact_eps_upper", ascending=False).head())
print(audit.pairs.groupby("hop_distance")["exact_eps_upper"].agg(["mean", "max"]))

# %% [markdown]
# ## The plan, made before running
# With no drop-out the run followed the planned schedule, so the planned and audited losses agree.

# %%
planned = api.plan(topo, WORK / "plan.json")
print(planned.text)
plan_vs_run = pd.merge(planned.pairs[["source", "observer", "exact_eps_upper"]],
                       audit.pairs[["source", "observer", "exact_eps_upper"]],
                       on=["source", "observer"], suffixes=("_planned", "_run"))
print(plan_vs_run.describe().loc[["mean", "max"]])
