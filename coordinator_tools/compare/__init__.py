"""`netdp compare`: random-walk DP-SGD against Muffliato-GD gossip at the same mean pairwise ε.

setup (the two protocols' comparable parameters), calibrate (σ per protocol from plans),
results (comparison.json from the two audits), figures (loss by hop distance, accuracy),
command (the pipeline and its CLI).
"""
