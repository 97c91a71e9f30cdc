"""Built-in plugin: the inline transport (one process; threads and bounded queues)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_transports(register):
    register("inline", "zoo.transports.inline.transport:InlineTransport",
             summary="one process only (threads, bounded queues): debugging with breakpoints, fast tests",
             cross_process=False)
