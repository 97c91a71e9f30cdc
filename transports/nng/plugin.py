"""Built-in plugin: the nng transport (pynng over ipc:// on one host, or tcp:// across hosts)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_transports(register):
    register("nng", "zoo.transports.nng.transport:NngTransport",
             summary="pynng over ipc:// (one host) or tcp:// (option scheme=tcp): one message per frame, "
                     "timeouts on every call")
