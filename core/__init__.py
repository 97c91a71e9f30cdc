"""Zoo's minimal core: plugin host, registries, wire format, streams, workers, controller.

Nothing in here is specific to an algorithm, an environment or a transport; those are
plugins (see :mod:`zoo.core.hookspecs`).
"""
