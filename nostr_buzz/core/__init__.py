"""The pure core: no sockets, files, clocks, environment or non-cryptographic randomness."""
