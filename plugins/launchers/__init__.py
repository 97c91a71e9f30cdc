"""Built-in launchers (registered through the ``register_launchers`` hook like third-party ones)."""
