"""Transports that carry protocol messages: gRPC between processes, or in-process for scale."""
