"""``hydra``, ``pipeline`` or ``tessel`` variants predicted again from a validation's rounds, against
each round's real runs.

A validation's Hydra rows (``daydream validate --opt hydra``) keep the baseline traces taken
around its rounds (``traces/hydra.mlp.base.rR.json.gz``, R = 0 before the first round; since
session 76 one before each K of a round, :func:`trace_before`), its
2-process pipeline and Tessel rows theirs (``traces/mlp.pipeline-base.rR.json.gz``,
``traces/mlp.tessel-base.rR.json.gz``), and each row's real time per round
(``measured_rounds_ms`` in ``results.csv``).  This predicts each row of ``--opt`` (``hydra`` by
default; the 2-stage rows of the others) in round R from the trace taken before it, with every
``--spec`` (options added to the row's spec, ``""`` for the row's own) in turns, now, and prints
each prediction's signed error against the round's real time, then per spec and row the mean
over the rounds, and for Hydra per spec and K the shard-parallel over model-parallel ratio's
mean error (the quantity ``hydra_sp_mp.py`` reads from the file).  The co-run rates are measured
again for every trace (``optimizations._corun.forget_measured``), in the machine's state of now,
so a round's error here says less than the difference between specs, which meet the machine's
drift alike.  (A validation row's own prediction also takes the trace after each round.)

    python benchmarks/hydra_specs.py DIR --spec corun=compute --spec ""
    python benchmarks/hydra_specs.py DIR --opt pipeline --spec corun=compute --spec ""

``--without FIELD`` predicts from a copy of the validation's device profile without that
calibrated field (as if never measured; e.g. ``resume``, the factor for work resumed after an
idle gap), for every spec: compare with a run without it, one after the other.

    python benchmarks/hydra_specs.py DIR --without resume

``--p2p-from PROFILE`` (repeat) predicts from a copy of the validation's profile whose
point-to-point figures (those one sitting measures, :data:`daydream.calibrate_procs.P2P_FIELDS`)
are pooled with those of the given profiles, each the median (as a calibration pools its
sittings' since session 79, :func:`daydream.calibrate_procs.pool_p2p`): how much a calibration's
one sitting in a spell moved the rows.

    python benchmarks/hydra_specs.py DIR --spec corun=off --p2p-from OTHER/device-cpu-1t.json ...
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
from pathlib import Path

__all__ = ["main", "hydra_rows", "with_options", "profile_without", "profile_p2p_pooled", "trace_before", "TRACES"]

#: Each ``--opt``'s baseline trace of round R, in a validation's ``traces/``.
TRACES = {"hydra": "hydra.mlp.base.r{}.json.gz", "pipeline": "mlp.pipeline-base.r{}.json.gz",
          "tessel": "mlp.tessel-base.r{}.json.gz"}


def hydra_rows(path, opt: str = "hydra") -> list:
    """``[(spec, [real ms per round])]`` of a results CSV's rows of ``opt`` on 2 or more
    processes (its Hydra rows; its pipeline or Tessel rows of ``stages=2``)."""
    with open(path, newline="") as f:
        return [(r["optimization"], [float(x) for x in r["measured_rounds_ms"].split()])
                for r in csv.DictReader(line for line in f if not line.startswith("#"))
                if r["optimization"].startswith(f"{opt}:") and "stages=1," not in r["optimization"]]


def with_options(spec: str, options: str) -> str:
    """``spec`` with ``options`` (``k=v,...``) set, replacing its own values of those keys.

    >>> with_options("hydra:models=2,corun=trace,cycle=auto", "corun=compute")
    'hydra:models=2,corun=compute,cycle=auto'
    >>> with_options("hydra:models=2", "")
    'hydra:models=2'
    """
    name, _, rest = spec.partition(":")
    kv = dict(x.split("=", 1) for x in rest.split(",") if x)
    kv.update(dict(x.split("=", 1) for x in options.split(",") if x))
    return f"{name}:" + ",".join(f"{k}={v}" for k, v in kv.items())


def profile_without(path, fields, out_dir) -> str:
    """The device profile at ``path``, or a copy of it in ``out_dir`` without ``fields`` (each
    must be one of its keys: a typo would otherwise compare a profile with itself)."""
    if not fields:
        return str(path)
    doc = json.loads(Path(path).read_text())
    missing = [f for f in fields if f not in doc]
    if missing:
        raise SystemExit(f"hydra_specs: {path}: no field {', '.join(missing)} (it has {', '.join(doc)})")
    out = Path(out_dir) / Path(path).name
    out.write_text(json.dumps({k: v for k, v in doc.items() if k not in fields}))
    return str(out)


def profile_p2p_pooled(path, others, out_dir) -> str:
    """The device profile at ``path``, or a copy of it in ``out_dir`` whose point-to-point figures
    (:data:`daydream.calibrate_procs.P2P_FIELDS`, per backend) are pooled with those of the
    profiles ``others``: each the median of all of them (:func:`daydream.calibrate_procs.pool_p2p`)."""
    from daydream.calibrate_procs import P2P_FIELDS, pool_p2p

    if not others:
        return str(path)
    doc = json.loads(Path(path).read_text())
    docs = [doc] + [json.loads(Path(o).read_text()) for o in others]
    for backend in doc.get("p2p", {}):
        pooled = pool_p2p([{f: d[f][backend] for f in P2P_FIELDS if f in doc} for d in docs])
        for f, v in pooled.items():
            doc[f][backend] = v
    out = Path(out_dir) / ("p2p-pooled-" + Path(path).name)
    out.write_text(json.dumps(doc))
    return str(out)


def trace_before(d, opt: str, spec: str, rd: int, n_rounds: int) -> int:
    """The number of the trace taken right before round ``rd``'s real runs of ``spec``'s row, in
    the validation directory ``d``: ``rd``, but for a Hydra validation of session 76 on, which
    traces before each K of a round (:data:`daydream.validation.hydra.MODELS`), told apart by its
    number of traces (``rounds x len(MODELS) + 1``)."""
    from daydream.validation.hydra import MODELS

    if opt != "hydra" or len(list((Path(d) / "traces").glob(TRACES[opt].format("*")))) != n_rounds * len(MODELS) + 1:
        return rd
    return rd * len(MODELS) + MODELS.index(int(spec.split("models=")[1].split(",")[0]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="a validation's output directory (its results.csv, traces/ and device-cpu-1t.json)")
    ap.add_argument("--opt", choices=tuple(TRACES), default="hydra", help="whose rows (default: hydra)")
    ap.add_argument("--spec", action="append", default=None, help="options to compare (repeat; '' = the row's)")
    ap.add_argument("--rounds", type=int, nargs="+", default=None, help="round numbers (default: all)")
    ap.add_argument("--without", action="append", default=[], metavar="FIELD",
                    help="predict with the device profile less this calibrated field (repeat), e.g. resume")
    ap.add_argument("--p2p-from", action="append", default=[], metavar="PROFILE",
                    help="pool the profile's point-to-point figures with this profile's (repeat): each the median")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        profile = profile_without(Path(args.dir) / "device-cpu-1t.json", args.without, tmp)
        _compare(args, profile_p2p_pooled(profile, args.p2p_from, tmp))


def _compare(args, profile: str) -> None:
    from daydream.optimizations._corun import forget_measured
    from daydream.whatif import predict

    d = Path(args.dir)
    specs = args.spec if args.spec is not None else [""]
    rows = [(spec.replace("schedule_csv=", f"schedule_csv={d}/"), real)     # Tessel's, beside results.csv
            for spec, real in hydra_rows(d / "results.csv", args.opt)]
    if not rows:
        raise SystemExit(f"hydra_specs: {d / 'results.csv'}: no {args.opt} rows")
    n_rounds = min(len(r) for _, r in rows)
    rounds = args.rounds if args.rounds is not None else range(n_rounds)
    errors: dict = {}
    for rd in rounds:
        for s in specs:
            forget_measured()                   # each spec measures its rates afresh, in turns
            cells = []
            for spec, real in rows:
                base = d / "traces" / TRACES[args.opt].format(trace_before(d, args.opt, spec, rd, n_rounds))
                got = predict(str(base), [with_options(spec, s)], profile_path=profile)[0].predicted_ms
                errors.setdefault((s, spec), []).append((got, real[rd]))
                cells.append(f"{100 * (got / real[rd] - 1):+5.1f}")
            print(f"round {rd} [{s or 'defaults'}]: " + " ".join(cells), flush=True)
    for s in specs:
        for spec, _ in rows:
            v = errors[(s, spec)]
            print(f"[{s or 'defaults'}] {spec}: mean {statistics.fmean(100 * (p / r - 1) for p, r in v):+.1f} %")
        if args.opt == "hydra":
            _ratio_errors(s, rows, errors)


def _ratio_errors(s, rows, errors) -> None:
    """Per K: the mean over rounds of the predicted shard-parallel / model-parallel ratio's error."""
    by_k: dict = {}
    for spec, _ in rows:
        k = dict(x.split("=", 1) for x in spec.partition(":")[2].split(","))
        by_k.setdefault(k["models"], {})[k["schedule"]] = errors[(s, spec)]
    for k, sched in by_k.items():
        if {"model-parallel", "shard-parallel"} <= set(sched):
            e = [100 * ((ps / pm) / (rs / rm) - 1)
                 for (pm, rm), (ps, rs) in zip(sched["model-parallel"], sched["shard-parallel"])]
            print(f"[{s or 'defaults'}] K={k} shard-parallel / model-parallel: mean {statistics.fmean(e):+.1f} %")


if __name__ == "__main__":
    main()
