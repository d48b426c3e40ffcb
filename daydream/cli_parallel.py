"""CLI commands of the parallelism what-ifs: ``daydream devices``, ``daydream ptdp-search``."""
from __future__ import annotations

import csv
import json
import os
import sys
from dataclasses import asdict, dataclass

import click

from ._cli_util import handle_errors
from .errors import DaydreamError

__all__ = ["COMMANDS", "DeviceRow", "read_prices", "compare_devices", "SearchResult", "ptdp_search"]


# ------------------------------------------------------------------ devices
@dataclass(frozen=True)
class DeviceRow:
    """One device of a side-by-side comparison."""

    device: str
    predicted_ms: float | None
    speedup: float | None
    usd_per_hour: float | None
    usd_per_1000_iterations: float | None
    reason: str = ""      # why the device was refused (predicted_ms is None)


def read_prices(path: str) -> dict:
    """Price per device-hour from a JSON object ``{"A100": 3.0}`` or a CSV ``device,usd_per_hour``.

    Raises
    ------
    DaydreamError
        If the file cannot be read or a price is not a number.
    """
    try:
        with open(path, newline="") as f:
            if path.endswith(".json"):
                raw = json.load(f)
                if not isinstance(raw, dict):
                    raise ValueError("expected an object of device name to price per hour")
            else:
                rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
                if rows and not _is_number(rows[0][1] if len(rows[0]) > 1 else ""):
                    rows = rows[1:]   # header
                raw = {r[0].strip(): r[1].strip() for r in rows if len(r) >= 2}
        return {str(k): float(v) for k, v in raw.items()}
    except (OSError, ValueError, IndexError) as exc:
        raise DaydreamError(f"{path}: not a price table ({exc})") from None


def _is_number(text) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _price_for(name: str, prices: dict):
    key = os.path.basename(name)
    for k, v in prices.items():
        if k.upper() == name.upper() or k == key:
            return v
    return None


def compare_devices(trace, devices, prices=None, profile_path=None, progress=None) -> tuple:
    """Predict ``trace`` on each device; returns (simulated ms on the traced device, rows).

    A device that cannot be predicted (unknown name, GPU trace onto a CPU
    profile) gets a row with the reason; if none can, the first reason is raised.
    """
    from .whatif import predict

    rows, measured = [], None
    for name in devices:
        if progress:
            progress(f"predicting on {name} ...")
        price = _price_for(name, prices or {})
        try:
            rep, _ = predict(trace, [f"device:target={name}"], profile_path=profile_path)
        except DaydreamError as exc:
            rows.append(DeviceRow(name, None, None, price, None, str(exc)))
            continue
        measured = rep.baseline_ms
        cost = price * rep.predicted_ms / 3.6e6 * 1000 if price is not None else None
        rows.append(DeviceRow(name, rep.predicted_ms, rep.speedup, price, cost))
    if measured is None:
        raise DaydreamError(rows[0].reason)
    return measured, rows


@click.command()
@click.argument("trace", type=click.Path())
@click.option("--device", "devices", required=True, metavar="NAMES",
              help="Comma-separated published names (V100,A100,H100,H200,RTX2080TI) or profile JSON files.")
@click.option("--prices", type=click.Path(), help="Price per device-hour: JSON {name: usd} or CSV device,usd_per_hour.")
@click.option("--profile", "profile_path", type=click.Path(), help="Profile of the traced device (CPU traces).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handle_errors
def devices(trace, devices, prices, profile_path, as_json):
    """Predict TRACE's iteration on other devices, side by side, with cost per 1000 iterations.

    \b
    Examples:
      daydream devices run.json.gz --device V100,A100,H100 --prices prices.csv
      daydream devices cpu.json.gz --device ~/.cache/daydream/device-cpu-2t.json
    """
    from .analysis import as_trace

    names = [d.strip() for d in devices.split(",") if d.strip()]
    if not names:
        raise DaydreamError("--device: give at least one device name or profile file")
    table = read_prices(prices) if prices else {}
    base, rows = compare_devices(as_trace([trace], None), names, table, profile_path,
                                 progress=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json.dumps({"baseline_ms": base, "devices": [asdict(r) for r in rows]}))
        return
    click.echo(f"traced device (simulated): {base:.3f} ms/iteration")
    click.echo(f"{'device':<28}{'ms/iter':>12}{'speedup':>10}{'USD/h':>9}{'USD/1000 it':>13}")
    for r in rows:
        if r.predicted_ms is None:
            click.echo(f"{os.path.basename(r.device)[:27]:<28}{'refused':>12}   {r.reason}")
            continue
        price = f"{r.usd_per_hour:9.2f}" if r.usd_per_hour is not None else f"{'-':>9}"
        cost = f"{r.usd_per_1000_iterations:13.4f}" if r.usd_per_1000_iterations is not None else f"{'-':>13}"
        click.echo(f"{os.path.basename(r.device)[:27]:<28}{r.predicted_ms:12.3f}{r.speedup:9.2f}x{price}{cost}")


# -------------------------------------------------------------- ptdp-search
@dataclass(frozen=True)
class SearchResult:
    """One configuration's prediction (``reason`` says why it was refused, if it was)."""

    config: str
    spec: str
    predicted_ms: float | None
    memory_bytes_per_device: int | None
    reason: str = ""


def ptdp_search(trace, n_devices, microbatches=(4,), schedule="1f1b", profile_path=None, device=None,
                max_tensor=0, progress=None, api="megatron", heads=0):
    """Predict every (p, t, d) for ``n_devices``; returns (results ranked, interrupted, notes).

    Ranked by predicted time, then memory; refused configurations last.  A
    KeyboardInterrupt stops the search and keeps what was found so far.
    """
    from .optimizations.ptdp import configurations, pipeline_available
    from .whatif import predict

    notes = []
    have_pipe = pipeline_available()
    if not have_pipe:
        notes.append("the pipeline what-if is not installed: configurations with p > 1 were skipped")
    configs = configurations(n_devices, microbatches, max_tensor, pipeline=have_pipe)
    results, interrupted = [], False
    try:
        for i, c in enumerate(configs, 1):
            spec = c.spec(schedule) + f",api={api}" + (f",heads={heads}" if heads else "")
            try:
                rep, _ = predict(trace, [spec], device=device, profile_path=profile_path)
                r = SearchResult(c.label(), spec, rep.predicted_ms, int(rep.metrics["memory_bytes_per_device"]))
            except DaydreamError as exc:
                r = SearchResult(c.label(), spec, None, None, str(exc))
            results.append(r)
            if progress:
                best = min((x for x in results if x.predicted_ms is not None), key=lambda x: x.predicted_ms,
                           default=None)
                what = f"{r.predicted_ms:.2f} ms" if r.predicted_ms is not None else f"refused ({r.reason})"
                progress(f"[{i}/{len(configs)}] {c.label()}: {what}"
                         + (f"; best so far {best.config} {best.predicted_ms:.2f} ms" if best else ""))
    except KeyboardInterrupt:
        interrupted = True
    ok = sorted((r for r in results if r.predicted_ms is not None),
                key=lambda r: (r.predicted_ms, r.memory_bytes_per_device))
    return ok + [r for r in results if r.predicted_ms is None], interrupted, notes


@click.command("ptdp-search")
@click.argument("trace", type=click.Path())
@click.option("--devices", "n_devices", required=True, type=int, help="Devices in all (p x t x d).")
@click.option("--microbatches", default="4", show_default=True, help="Micro-batch counts to try (comma separated).")
@click.option("--schedule", default="1f1b", show_default=True, help="Pipeline schedule.")
@click.option("--max-tensor", default=0, help="Largest tensor-parallel degree to try (0: any).")
@click.option("--max-memory-gb", type=float, help="Drop configurations needing more memory per device.")
@click.option("--api", type=click.Choice(["megatron", "torch"]), default="megatron", show_default=True,
              help="Tensor-parallel implementation overhead: megatron (none) or torch (DTensor, measured here).")
@click.option("--heads", default=0, help="Attention heads (tensor degrees must divide them; 0: from the trace).")
@click.option("--device", help="Cost figures of a published device (V100, A100, H100, ...).")
@click.option("--profile", "profile_path", type=click.Path(), help="Device profile from `daydream calibrate -o`.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handle_errors
def ptdp_search_cmd(trace, n_devices, microbatches, schedule, max_tensor, max_memory_gb, api, heads, device,
                    profile_path, as_json):
    """Rank pipeline x tensor x data configurations of N devices by predicted iteration time.

    Progress goes to stderr; Ctrl-C stops the search, prints the ranking of what
    was predicted so far and exits with status 130.

    \b
    Examples:
      daydream ptdp-search run.json.gz --devices 8 --microbatches 4,8 --device A100
    """
    from .analysis import as_trace

    try:
        mbs = tuple(int(x) for x in microbatches.split(",") if x.strip())
    except ValueError:
        raise DaydreamError(f"--microbatches: expected integers, got {microbatches!r}") from None
    results, interrupted, notes = ptdp_search(
        as_trace([trace], None), n_devices, mbs or (4,), schedule, profile_path, device, max_tensor,
        progress=lambda m: click.echo(m, err=True), api=api, heads=heads)
    if max_memory_gb is not None:
        results = [r for r in results if r.predicted_ms is None or r.memory_bytes_per_device <= max_memory_gb * 1e9]
    if interrupted:
        notes.append(f"interrupted: {len(results)} configuration(s) predicted before Ctrl-C")
    if as_json:
        click.echo(json.dumps({"results": [asdict(r) for r in results], "notes": notes}))
    else:
        _print_ranking(results, notes)
    if interrupted:
        sys.exit(130)


def _print_ranking(results, notes) -> None:
    click.echo(f"{'rank':<6}{'configuration':<22}{'ms/iter':>12}{'GB/device':>12}")
    for i, r in enumerate(results, 1):
        if r.predicted_ms is None:
            click.echo(f"{'-':<6}{r.config:<22}{'refused':>12}   {r.reason}")
        else:
            click.echo(f"{i:<6}{r.config:<22}{r.predicted_ms:12.3f}{r.memory_bytes_per_device / 1e9:12.4f}")
    for n in notes:
        click.echo(f"note: {n}")


#: Commands added by the parallelism work.
COMMANDS: list = [devices, ptdp_search_cmd]
