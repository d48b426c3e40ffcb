"""``daydream trace``: record a trace of an unmodified training script."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ._cli_util import handle_errors

__all__ = ["COMMANDS", "trace"]


@click.command(
    "trace",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("-o", "--output", default="trace.json", show_default=True, type=click.Path(),
              help="Trace file (.json or .json.gz); multi-rank runs write NAME.rankR.json.")
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(min=0),
              help="Full iterations to skip (after the setup before the first step); with 2 or more "
                   "the one two before recording records the ops' shapes; with 6 or more the untraced "
                   "ones measure what recording costs (printed, and shown by `daydream info`).")
@click.option("-n", "--iterations", default=5, show_default=True, type=click.IntRange(min=1),
              help="Iterations to record.")
@click.option("--activities", default="cpu,cuda", show_default=True,
              help="cpu, cuda or both; cuda is skipped without a GPU (the metadata says so).")
@click.option("--nproc", type=click.IntRange(min=1), default=None,
              help="Run the python command under torch.distributed.run with this many ranks.")
@click.option("--pin-cores", is_flag=True,
              help="Give each local rank its own share of the CPU cores (rank r of K: cores r*n/K to "
                   "(r+1)*n/K - 1), set before the script starts.  For CPU jobs with a rank per core: "
                   "without it Linux may run two ranks' threads on one core for stretches.")
@click.option("-f", "--force", is_flag=True, help="Overwrite existing trace files.")
@click.option("--no-shapes", is_flag=True, help="Do not record op input shapes (less overhead).")
@click.option("--shapes-every-iteration", is_flag=True,
              help="Record op input shapes in every recorded iteration (more overhead).  By default "
                   "they are recorded in a warm-up iteration and copied to the same ops of the "
                   "recorded ones; an iteration whose model inputs have other shapes gets none.")
@click.option("--backward-ranges", is_flag=True,
              help="Also mark each module's backward pass with hooks on autograd nodes (more overhead; "
                   "by default backward ops take their module from the forward op of the same "
                   "autograd sequence number).")
@click.option("--cupti/--no-cupti", default=True, show_default=True,
              help="On a CUDA device, GPU activity (kernels, copies, runtime and driver calls, syncs) from "
                   "daydream's CUPTI extension; --no-cupti, or an extension that cannot run, takes it from "
                   "torch.profiler (the trace's metadata says which and why).")
@click.option("--no-heap-reserve", is_flag=True,
              help="Do not keep pre-faulted free heap for what the profiler's records displace "
                   "(by default the recorded ops pay no page faults the untraced ones would not).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@handle_errors
def trace(output, warmup, iterations, activities, nproc, pin_cores, force, no_shapes, shapes_every_iteration,
          backward_ranges, cupti, no_heap_reserve, command):
    """Run COMMAND (e.g. python train.py ARGS) and record a few training iterations.

    \b
    Iterations are found from optimizer.step() (or daydream.step(), or the
    script's own profiler.step()).  The script's output and exit status pass
    through; the trace is written atomically.
    \b
    Examples:
      daydream trace -o mlp.json -- python -m daydream.workloads.mlp --steps 10
      daydream trace --nproc 2 -o ddp.json -- python train.py --epochs 1
    """
    from .collect.launch import TraceRequest, explain, run_traced

    req = TraceRequest(
        command=tuple(command),
        output=Path(output),
        warmup=warmup,
        iterations=iterations,
        activities=tuple(a for a in activities.split(",") if a),
        record_shapes=not no_shapes,
        shapes_every_iteration=shapes_every_iteration,
        backward_ranges=backward_ranges,
        force=force,
        nproc=nproc,
        use_cupti=cupti,
        pin_cores=pin_cores,
        heap_reserve=not no_heap_reserve,
    )
    outcome = run_traced(req)
    lines, error = explain(outcome, req)
    for line in lines:
        click.echo(line, err=True)
    if error is not None:
        click.echo(f"error: {error}", err=True)
        sys.exit(outcome.exit_status or 2)
    sys.exit(outcome.exit_status)


COMMANDS = [trace]
