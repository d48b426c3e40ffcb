"""Coverage-guided fuzzing of the trace loaders with atheris (optional; not a dependency).

Each input is trace bytes, read as a whole file would be: through the
reference parser and the compiled fast loader where built, then graph build
and simulation (``bytes``/``fast``/``pipeline`` loaders of ``fuzz_loaders``).
A crash or hang (see ``fuzz_loaders.run_case``) stops the run with the input
saved by libFuzzer (``crash-*``).  atheris installs from a wheel; keep it out
of the project's environment::

    python -m venv /tmp/athvenv && /tmp/athvenv/bin/pip install atheris
    # make the project importable there (a .pth with site.addsitedir(...)), then
    /tmp/athvenv/bin/python benchmarks/fuzz_atheris.py -max_total_time=300 -seed=1 /tmp/athcorpus

Seed inputs (the small synthetic and the bundled traces, and tests/corpus) go
into the corpus folder given (created if missing).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

with atheris.instrument_imports():
    import fuzz_loaders as F
    import daydream.loader.io  # noqa: F401
    import daydream.loader.kineto  # noqa: F401
    import daydream.graph.build  # noqa: F401

RUNS = {"cases": 0, "ok": 0, "errors": 0}


def _seed(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        return
    docs = [F.small_doc(2), F.small_doc(3)] + F.real_docs()
    for k, d in enumerate(docs):
        (folder / f"seed{k}.json").write_bytes(json.dumps(d).encode())
    for p in (HERE.parent / "tests" / "corpus").glob("*.json"):
        if not p.name.startswith(("profile_", "expected")):
            (folder / p.name).write_bytes(p.read_bytes())


def test_one(data: bytes) -> None:
    RUNS["cases"] += 1
    for loader in ("bytes", "fast") if F.fast_loader() else ("bytes",):
        out = F.run_case(loader, data, timeout_s=F.CASE_TIMEOUT_S)
        if out.bad:
            raise RuntimeError(f"{loader}: {out.status}: {out.detail}")
        RUNS["ok" if out.status == "ok" else "errors"] += 1
    try:
        from daydream.loader.io import decode_document

        doc = decode_document("fuzz.json", data)
    except Exception:  # noqa: BLE001 - refused above already, as a one-line error
        return
    out = F.run_case("pipeline", [doc], timeout_s=F.CASE_TIMEOUT_S)
    if out.bad:
        raise RuntimeError(f"pipeline: {out.status}: {out.detail}")


def main() -> None:
    folders = [a for a in sys.argv[1:] if not a.startswith("-")]
    if folders:
        _seed(Path(folders[0]))
    os.environ.setdefault("DAYDREAM_PROGRESS", "0")
    atheris.Setup(sys.argv, test_one)
    try:
        atheris.Fuzz()
    finally:
        print(f"atheris: {RUNS['cases']} inputs, {RUNS['ok']} accepted, {RUNS['errors']} one-line errors",
              file=sys.stderr)


if __name__ == "__main__":
    main()
