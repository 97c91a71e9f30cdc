"""zoo-corridor: an example third-party Zoo plugin registering the ``corridor`` env.

Importing this package (or its ``plugin`` module, which Zoo loads through the
``zoo.plugins`` entry point) imports neither gymnasium nor numpy; ``zoo_corridor.env``
does, and Zoo imports it only when a corridor env is built.
"""
__version__ = "0.3.0"
