"""Published topologies: graph generators, weights and the `netdp topology` commands."""
