"""The netdp wire format: protobuf definitions and their generated Python stubs."""
