"""Built-in transports, each registered through ``register_transports``."""
