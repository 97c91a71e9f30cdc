"""The ``tcp`` transport: plain stdlib sockets, length-prefixed records (see :mod:`.engine`)."""
