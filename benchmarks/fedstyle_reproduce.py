"""``fedclock reproduce fedstyle`` on a machine of its own, timed: the FedStyle report's runs.

The FedStyle claim set (``scenarios/reproductions/fedstyle.yaml``: fedstyle/quick_ablations,
3 paired seeds, FedStyle / lambda = 0 / FedAvg, each with its final linear evaluation) is
9 independent runs. This script runs them ``--jobs`` at a time (one process and one CPU
thread each; ``--device cuda`` puts every run's models on the GPU), writes the report
(``OUT/report/fedstyle.md`` and its PNGs) and a timing file ``OUT/fedstyle_reproduce.txt``:
the command line, the wall time, the device and the claims' verdicts.

    python benchmarks/fedstyle_reproduce.py --out OUT [--device cpu|cuda] [--jobs N]
                                            [--seeds N] [--tiny] [--set KEY=VALUE ...]

``--tiny`` shrinks the setting to a check that finishes in minutes on a laptop (2 rounds,
32 images per style, 2 probe epochs, 2 seeds); its figures mean nothing.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from fedclock.scenarios.reproduce import reproduce

TINY = ("stop.rounds=2", "evaluation.every=2", "dataset.domains.samples_per_domain=32",
        "evaluation.linear.epochs=2")
"""The ``--tiny`` overrides (a smoke check of the script, not a setting to read)."""


def main(argv: list[str] | None = None) -> int:
    """Run the claim set and write the report and the timing file; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for runs/, report/ and the timing file")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--jobs", type=int, default=1, help="runs side by side (one process each)")
    parser.add_argument("--seeds", type=int, default=None, help="default: the claim set's (3)")
    parser.add_argument("--tiny", action="store_true", help="a tiny smoke setting (module docstring)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sets = list(TINY if args.tiny else ()) + list(args.sets)
    if args.device == "cuda":
        sets.append("runtime.device=cuda")
    seeds = 2 if args.tiny and args.seeds is None else args.seeds
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    path, outcomes = reproduce("fedstyle", seeds, args.jobs, args.out / "runs", args.out / "report", sets=sets)
    wall = time.perf_counter() - start
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else f"cpu ({args.jobs} jobs)"
    lines = [f"fedstyle reproduce: wall {wall:.1f} s on {device}; seeds {seeds or 'claim set default'}; "
             f"--set {' '.join(sets) or '(none)'}", f"report: {path}"]
    lines += [f"{o.claim.id}: {o.verdict} (A - B {o.stats.mean * 100:+.2f} points, "
              f"95 % CI [{o.stats.low * 100:+.2f}, {o.stats.high * 100:+.2f}])" for o in outcomes]
    (args.out / "fedstyle_reproduce.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
