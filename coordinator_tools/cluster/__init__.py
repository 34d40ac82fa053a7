"""Local clusters: one OS process per node on loopback, `netdp run` and `netdp demo`."""
