"""Built-in plugin: the shm transport (shared-memory slot rings on one host)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_transports(register):
    register("shm", "zoo.transports.shm.transport:ShmTransport",
             summary="one host: frames in pre-allocated shared-memory slot rings, slot indices on Unix sockets")
