"""The ``auto`` transport: shared memory within a host, nng over tcp across hosts."""
