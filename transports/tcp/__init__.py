"""The ``tcp`` transport: plain stdlib sockets, length-prefixed records (see :mod:`.transport`;
the socket machinery it shares with ``shm`` is in :mod:`zoo.transports.sockets`)."""
