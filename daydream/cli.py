"""Command-line interface: ``daydream COMMAND``.

The CLI is a thin layer over the library: it parses arguments, calls the core
and prints.  Expected failures (:class:`daydream.errors.DaydreamError`) become
one line on stderr and exit status 2.
"""
from __future__ import annotations

import click

from ._cli_util import handle_errors, quiet_kineto

__all__ = ["main", "handle_errors"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="daydream")
@click.pass_context
def main(ctx):
    """daydream: predict how fast one training iteration would be after an
    optimization, from one trace of the code you run today.

    \b
    Typical use:
      daydream trace -o run.json.gz -- python train.py ARGS   # trace your script
      daydream info   run.json.gz           # what is in a trace
      daydream replay run.json.gz           # replay it: simulated vs measured
      daydream whatif run.json.gz --opt amp --opt fused-adam -o predicted.json
      daydream plot timeline run.json.gz --vs predicted.json -o timeline.png
      daydream optimizations                # every what-if and its parameters
      daydream validate -o results/         # predictions against real runs here

    Kineto's own log (a line at every profiler start and stop) is silenced
    except under ``daydream trace``, where your script's output passes
    through as it is; set KINETO_LOG_LEVEL to choose.
    """
    if ctx.invoked_subcommand != "trace":
        quiet_kineto()


def _register() -> None:
    from . import cli_collect, cli_core, cli_doctor, cli_parallel, cli_plot, cli_whatif

    for module in (cli_core, cli_whatif, cli_parallel, cli_plot, cli_collect, cli_doctor):
        for cmd in module.COMMANDS:
            main.add_command(cmd)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
