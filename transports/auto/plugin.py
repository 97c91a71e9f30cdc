"""Built-in plugin: the auto transport (shm when both ends of a stream share a host, else nng over tcp)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_transports(register):
    register("auto", "zoo.transports.auto.transport:auto_transport",
             summary="the default: shm when every end of a stream is on one host, nng over tcp:// otherwise")
