"""Built-in plugin: the tcp transport (stdlib sockets, length-prefixed frames)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_transports(register):
    register("tcp", "zoo.transports.tcp.transport:TcpTransport",
             summary="plain TCP sockets (stdlib), length-prefixed frames; 127.0.0.1 unless a host is given; "
                     "optional token")
