"""The ``files`` resolver: one file per key in the run directory."""
