"""The ``local`` launcher: every worker is a spawned process on this host."""
