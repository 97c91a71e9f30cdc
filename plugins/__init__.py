"""Built-in plugins: algorithms, environments (each registered through the same hooks as third-party plugins)."""
