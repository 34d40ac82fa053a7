"""`netdp sweep`: privacy–utility sweeps over a grid of protocols, graphs, sizes, lengths and noise.

grid (the grid as a pydantic model, checked up front, and its expansion into points with their
seeds), point (one point calibrated, run, audited and summarised as its CSV row), state
(sweep.json, the row files and what is finished), figures (utility against mean and worst-pair
ε), command (the CLI and the loop over points).
"""
