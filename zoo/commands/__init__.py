"""Zoo's own extra commands (``zoo bench``, ``zoo eval``, ``zoo plot``, ``zoo runs``), added to the CLI
through the ``register_commands(app)`` hook like any plugin's commands (see :mod:`.plugin`)."""
