"""Protocol engines: pure protocol logic over an abstract transport, one module per protocol."""
