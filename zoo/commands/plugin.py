"""Built-in plugin: the commands that look at and measure runs.

``zoo bench``, ``zoo eval``, ``zoo league``, ``zoo plot``, ``zoo runs``.

They go through the same ``register_commands(app)`` hook a third-party plugin uses. The
command modules import numpy, torch and matplotlib only when a command runs, so
importing this module (every ``zoo`` start) stays cheap.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_commands(app):
    from zoo.commands.bench import bench_command
    from zoo.commands.eval import eval_command
    from zoo.commands.league import league_command
    from zoo.commands.plot import plot_command
    from zoo.commands.runs import runs_command

    app.command("bench")(bench_command)
    app.command("eval")(eval_command)
    app.command("league")(league_command)
    app.command("plot")(plot_command)
    app.command("runs")(runs_command)
