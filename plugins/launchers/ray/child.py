"""Entry point of a worker process started by the ``ray`` launcher's worker host.

``python -m zoo.plugins.launchers.ray.child`` reads its pickled
:class:`~zoo.core.workers.base.WorkerContext` from standard input and runs
:func:`~zoo.core.workers.base.worker_main` with it (which never returns: it exits with the
worker's status). A fresh interpreter, as the launcher contract asks (never a fork of the
Ray worker, whose threads nng and torch must not inherit).
"""
import pickle
import sys

from zoo.core.workers.base import worker_main


def main() -> None:
    ctx = pickle.load(sys.stdin.buffer)
    sys.stdin.close()
    worker_main(ctx)


if __name__ == "__main__":
    main()
