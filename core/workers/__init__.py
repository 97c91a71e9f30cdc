"""Worker roles, in data-path order: actor -> policy -> trainer (see :mod:`zoo.core.streams`)."""
