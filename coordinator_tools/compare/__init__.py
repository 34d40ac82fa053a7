"""`netdp compare`: random-walk DP-SGD against Muffliato-GD gossip at the same mean pairwise ε, or
(`--designs`) noise designs for private averaging at the same target ε.

setup (the two protocols' comparable parameters), calibrate (σ per protocol from plans),
results (comparison.json from the two audits), designs (the noise designs' setup, calibration,
audits and designs.csv), figures (loss by hop distance, accuracy, utility against ε),
command (the pipelines and their CLI).
"""
