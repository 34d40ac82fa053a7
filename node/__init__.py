"""netdp peer: one gRPC service per node that owns its data, noise and view log."""
