"""Socket machinery shared by the byte transports; not a plugin (it registers nothing).

- :mod:`.engine` — connections, TCP / Unix addresses, the listening and dialing endpoint bases.
- :mod:`.patterns` — the three patterns over the engine, frames inline (the ``tcp``
  transport's endpoints; ``shm`` subclasses them to move frames through shared memory).
- :mod:`.framing` — the record layout on a socket (HELLO, FRAME and ``shm``'s control records).
- :mod:`.spin` — adaptive spin-then-block waiting (also used by ``nng``).
- :mod:`.rundir` — the per-run directory (``nng``, ``tcp`` and ``shm``) and reclaiming the
  directories of dead runs.
"""
