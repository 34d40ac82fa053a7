"""netdp wire format, version 1 (generated stubs beside the .proto files)."""
