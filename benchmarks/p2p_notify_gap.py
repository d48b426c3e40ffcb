"""The notified hand-over gap (``p2p_notified - p2p_preposted``) by message size, as calibration times it.

Two pinned gloo processes (as ``daydream calibrate`` starts them) run
``daydream.calibrate_procs._p2p_notified_ns`` once per size: preposted sends whose arrival the
receiver learns by waiting on the receive or through the Hydra runtime's waiter thread
(``daydream.workloads.hydra.Arrivals``), alternating in pairs. Calibration times the smallest
size of ``GLOO_SIZES`` only; the Hydra validation's activations and gradients are 128 KiB
(hidden 512, batch 64, float32). Prints per size the two one-way figures and their gap, in us.

Usage::

    python benchmarks/p2p_notify_gap.py --sizes 16384,131072,524288
"""
from __future__ import annotations

import argparse

from daydream.calibrate_procs import _notify_gap_worker, first_result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16384,131072", help="message sizes in bytes, comma-separated")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    for nbytes, (preposted, notified) in zip(sizes, first_result(_notify_gap_worker, 2, (sizes,))):
        print(f"{nbytes:>8} B: preposted {preposted / 1e3:7.1f} us, notified {notified / 1e3:7.1f} us, "
              f"gap {(notified - preposted) / 1e3:6.1f} us")


if __name__ == "__main__":
    main()
