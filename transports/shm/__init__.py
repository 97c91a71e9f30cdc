"""The ``shm`` transport: slot rings in shared memory, slot indices on Unix sockets (one host)."""
