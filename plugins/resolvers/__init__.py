"""Built-in resolver plugins (name resolution: :mod:`zoo.core.resolver`)."""
