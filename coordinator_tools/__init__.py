"""Offline and admin tools: topologies, data, local clusters, deployment and the auditor."""
