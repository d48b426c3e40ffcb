"""Everything issue 3's GPU half asks for, in one run on a CUDA machine.

Each step runs in its own process with a time limit, so one failure leaves
the others' results; everything lands in OUT (``summary.json``, one log per
step, the traces):

1. ``doctor``: torch, device, the CUPTI extension built / loaded / usable.
2. ``tests``: the CUPTI, alignment and collection tests (the GPU-only ones run here).
3. ``trace``: each bundled workload traced on the GPU with kernels from
   torch.profiler and from ``daydream.cupti``; each trace replayed by the core
   (measured against simulated iteration time), with its event counts and the
   extension's clock/thread alignment.
4. ``overhead``: ``benchmarks/gpu_overhead.py`` (the extension against torch.profiler).
5. ``whatif``: a GPU profile (``daydream calibrate --device cuda --quick``), then
   ``amp:dtype=bfloat16`` and ``fused-adam`` predicted from each baseline trace
   and measured by tracing the real variant; the baseline is traced again after
   the variant, and the row's prediction is the mean of the two baselines'.
6. ``turns``: the same what-ifs with baseline and variant traced at once, iterations
   in turns (as ``daydream validate`` does on CPU), ``--whatif-rounds`` rounds.

    python benchmarks/gpu_session.py OUT [--steps ...] [--only trace,overhead] [--budget-s 480]
    python benchmarks/gpu_session.py OUT --device cpu --only trace,whatif   # dry run of the plumbing
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("mlp", "cnn", "transformer")
VARIANTS = {  # what-if -> (baseline flags, variant flags), as daydream.validate.CASES
    "amp:dtype=bfloat16": ((), ("--autocast", "bfloat16")),
    "fused-adam": (("--optimizer", "adam", "--optimizer-impl", "for-loop"),
                   ("--optimizer", "adam", "--optimizer-impl", "fused")),
}


TEST_FILES = ("tests/test_cupti.py", "tests/test_cupti_align.py", "tests/test_collect_api.py",
              "tests/test_tracer_safety.py", "tests/test_doctor.py")
DEADLINE = float("inf")  # time.time() after which no step starts (--budget-s)


def _run(out: Path, name: str, cmd: list, timeout: int) -> dict:
    t0 = time.time()
    timeout = min(timeout, DEADLINE - t0)
    if timeout < 15:
        print(f"[  skip] {name}: out of budget", flush=True)
        return {"rc": "skipped", "stdout": "", "stderr": "out of budget", "s": 0}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KINETO_LOG_LEVEL": os.environ.get("KINETO_LOG_LEVEL", "5")}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
        rc, so, se = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, so, se = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    (out / f"{name}.log").write_text(f"$ {' '.join(map(str, cmd))}\nrc={rc}\n--- stdout\n{so}\n--- stderr\n{se}")
    print(f"[{time.time() - t0:6.1f}s] {name}: rc={rc}", flush=True)
    return {"rc": rc, "stdout": so, "stderr": se, "s": round(time.time() - t0, 1)}


def _daydream(*args) -> list:
    return [sys.executable, "-m", "daydream", *map(str, args)]


DEVICE = "cuda"


def _trace_cmd(path: Path, workload: str, flags, steps: int, cupti: bool) -> list:
    # 20 warm-up steps: on the H200 (2026-11-27) the same untouched baseline traced after 6 read
    # 7.3, 8.8 and 11.3 ms in three processes (an idle GPU sits at 345 MHz and ramps up).
    return _daydream("trace", "-f", "-o", path, "--warmup", 20, "-n", 15, "--cupti" if cupti else "--no-cupti", "--",
                     sys.executable, "-m", f"daydream.workloads.{workload}", "--device", DEVICE,
                     "--steps", steps, "--quiet", *flags)


def _inspect(path: Path) -> dict:
    """Event counts per category, the activities metadata, and the replay error."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        return {"error": f"unreadable: {exc}"}
    cats = Counter(e.get("cat") for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X")
    info = {"cats": dict(cats), "activities": doc.get("daydream", {}).get("activities"),
            "device": doc.get("daydream", {}).get("device")}
    try:
        from daydream.analysis import replay

        rep, _ = replay(path)
        info.update(measured_ms=rep.measured_ms, simulated_ms=rep.simulated_ms, replay_error_pct=rep.error_pct,
                    iterations=len(rep.iterations))
    except Exception as exc:  # noqa: BLE001 - report and go on
        info["replay_error"] = f"{type(exc).__name__}: {exc}"
    return info


def step_doctor(out: Path, args, summary: dict) -> None:
    summary["doctor"] = _run(out, "doctor", _daydream("doctor"), 120)["stdout"]


def step_tests(out: Path, args, summary: dict) -> None:
    """One process per file, so that a crash at exit names its file (faulthandler on to the end)."""
    rows = summary.setdefault("tests", {})
    for f in TEST_FILES:
        r = _run(out, f"tests.{Path(f).stem}", [sys.executable, "-X", "faulthandler", "-m", "pytest", "-q",
                                               "-o", "addopts=", "-p", "no:faulthandler", "-rs", f], 120)
        rows[f] = {"rc": r["rc"], "tail": r["stdout"][-300:], "stderr_tail": r["stderr"][-1500:]}


def step_overhead(out: Path, args, summary: dict) -> None:
    if summary.get("cupti_hung"):
        return
    rows = summary.setdefault("overhead", {})
    for w in WORKLOADS:  # one process each, so that one hang costs one workload
        r = _run(out, f"overhead.{w}", [sys.executable, "benchmarks/gpu_overhead.py", "--workloads", w,
                                        "--rounds", str(args.overhead_rounds), "--arms", args.overhead_arms,
                                        "--block", str(args.overhead_block), "--keep", str(out / "overhead")], 240)
        rows[w] = {"rc": r["rc"], "rows": [json.loads(x) for x in r["stdout"].splitlines() if x.startswith("{")],
                   "table": r["stdout"][-600:]}


def step_trace(out: Path, args, summary: dict) -> None:
    steps = args.steps
    rows = summary.setdefault("trace", {})
    for w in WORKLOADS:
        for cupti in (False, True):
            key = f"{w}.{'cupti' if cupti else 'torch'}"
            if cupti and summary.get("cupti_hung"):
                rows[key] = {"rc": "skipped", "error": "an earlier CUPTI trace timed out"}
                continue
            path = out / f"{key}.json.gz"
            r = _run(out, f"trace.{key}", _trace_cmd(path, w, (), steps, cupti), 120)
            if cupti and r["rc"] == "timeout":
                summary["cupti_hung"] = key
            rows[key] = {"rc": r["rc"], **(_inspect(path) if path.exists() else {"error": "no trace"})}
            print(json.dumps({key: {k: v for k, v in rows[key].items() if k != "device"}})[:1500], flush=True)


def step_whatif(out: Path, args, summary: dict) -> None:
    steps = args.steps
    from daydream.analysis import replay

    prof = _profile(out, summary, "whatif")
    if prof is None:
        return
    rows = summary.setdefault("whatif", {})
    for w, opt, base_flags, var_flags, key in _cases():
        # baseline, variant, baseline again: the two baselines' spread is the processes' own
        base, var, base2 = (out / f"{key}.{s}.json.gz" for s in ("base", "variant", "base2"))
        for name, path, flags in (("base", base, base_flags), ("variant", var, var_flags),
                                  ("base2", base2, base_flags)):
            _run(out, f"whatif.{key}.{name}", _trace_cmd(path, w, flags, steps, False), 240)
        rows[key] = row = _new_row()
        try:
            for b in (x for x in (base, base2) if x.exists()):
                _add_prediction(row, _predict(out, key, b, opt, prof))
            row["measured_rounds_ms"].append(replay(var)[0].measured_ms)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"
        _summarize(row)
        print(json.dumps({key: row}), flush=True)


def _cases():
    """(workload, what-if, baseline flags, variant flags, row key) of each row."""
    for w in WORKLOADS:
        for opt, (base_flags, var_flags) in VARIANTS.items():
            yield w, opt, base_flags, var_flags, f"{w}.{opt.split(':')[0]}"


def _new_row() -> dict:
    return {"baselines_measured_ms": [], "predicted_rounds_ms": [], "measured_rounds_ms": []}


def _add_prediction(row: dict, pred: dict) -> None:
    row["baselines_measured_ms"].append(pred["measured_ms"])
    row["predicted_rounds_ms"].append(pred["predicted_ms"])


def _summarize(row: dict) -> None:
    """The row's mean prediction over its mean measurement, where it has both."""
    if row["predicted_rounds_ms"] and row["measured_rounds_ms"]:
        predicted = sum(row["predicted_rounds_ms"]) / len(row["predicted_rounds_ms"])
        measured = sum(row["measured_rounds_ms"]) / len(row["measured_rounds_ms"])
        row.update(predicted_ms=predicted, measured_ms=measured, error_pct=round((predicted / measured - 1) * 100, 2))


def step_turns(out: Path, args, summary: dict) -> None:
    """The what-ifs as ``daydream validate`` makes its rows: baseline and variant traced at once,
    iterations in turns on one core (``daydream.validate.trace_in_turns``, its workload sizes),
    ``--whatif-rounds`` rounds; the row is the mean prediction over the mean measurement."""
    from daydream.analysis import replay
    from daydream.validate import trace_in_turns

    prof = _profile(out, summary, "turns")
    if prof is None:
        return
    rows = summary.setdefault("turns", {})
    for w, opt, base_flags, var_flags, key in _cases():
        rows[key] = row = _new_row()
        try:
            for k in range(args.whatif_rounds):
                if time.time() > DEADLINE - 30:
                    raise TimeoutError("out of budget")
                base, var = out / f"turns.{key}.base.r{k}.json.gz", out / f"turns.{key}.variant.r{k}.json.gz"
                dev = ("--device", DEVICE)
                trace_in_turns([(w, base, (*base_flags, *dev), 1), (w, var, (*var_flags, *dev), 1)],
                               iterations=15, warmup=20)
                _add_prediction(row, _predict(out, f"turns.{key}.r{k}", base, opt, prof))
                row["measured_rounds_ms"].append(replay(var)[0].measured_ms)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"
        _summarize(row)
        print(json.dumps({key: row}), flush=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))


def _profile(out: Path, summary: dict, step: str):
    prof = out / f"device-{DEVICE}.json"
    if not prof.exists():
        r = _run(out, "calibrate", _daydream("calibrate", "--device", DEVICE, "--quick", "--no-collectives",
                                             "-o", prof, "--force"), 300)
        if not prof.exists():
            summary[step] = {"error": "calibration failed", "rc": r["rc"]}
            return None
    return prof


def _predict(out: Path, key: str, base: Path, opt: str, prof: Path) -> dict:
    r = _run(out, f"whatif.{key}.predict.{base.name.split('.')[-3]}",
             _daydream("whatif", base, "--opt", opt, "--profile", prof, "--json"), 240)
    if r["rc"] != 0:
        raise RuntimeError(r["stderr"][-400:])
    return json.loads(r["stdout"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--only", default="doctor,tests,trace,overhead,whatif", help="steps, run in the order given")
    ap.add_argument("--overhead-rounds", type=int, default=9, help="a multiple of the number of arms")
    ap.add_argument("--overhead-block", type=int, default=8)
    ap.add_argument("--overhead-arms", default="untraced,torch.profiler,cupti",
                    help="gpu_overhead.py --arms (add cpu-only,cupti-alone,cupti-all to take it apart)")
    ap.add_argument("--workloads", default="mlp,cnn,transformer", help="bundled workloads, comma separated")
    ap.add_argument("--opts", default="amp:dtype=bfloat16,fused-adam", help="what-ifs of whatif and turns, comma separated")
    ap.add_argument("--whatif-rounds", type=int, default=2, help="rounds of each what-if in `turns`")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to check the script itself")
    ap.add_argument("--budget-s", type=float, default=float("inf"),
                    help="seconds after which no further step starts (a lent GPU's time is short)")
    args = ap.parse_args(argv)
    global DEVICE, WORKLOADS, VARIANTS
    DEVICE = args.device
    WORKLOADS = tuple(args.workloads.split(","))
    VARIANTS = {k: VARIANTS[k] for k in args.opts.split(",")}
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    global DEADLINE
    DEADLINE = time.time() + args.budget_s
    summary: dict = {}
    steps = {"doctor": step_doctor, "tests": step_tests, "trace": step_trace, "overhead": step_overhead,
             "whatif": step_whatif, "turns": step_turns}
    for name in args.only.split(","):  # in the order given
        steps[name](out, args, summary)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
