"""The ``buzz`` command line: one module per command group, wired together in ``app``."""
