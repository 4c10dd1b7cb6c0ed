"""Stack Overflow's TFF files: peak memory of reading every user against sampling a few.

With a natural partition :mod:`fedclock.scenarios.data.tff_h5` reads every user's sentence count
first and then only the users that ``partition.sample_clients`` keeps
(:mod:`fedclock.scenarios.data.client_files`). This writes files in TFF's Stack Overflow layout
once (``--users`` users with ``max(1, lognormal)`` train sentences of mean ``--mean`` and one
test sentence each, 5 to 24 words drawn from 150 made-up words: the text does not matter
here, only its size; :mod:`fedclock.scenarios.data.stackoverflow_generate` makes learnable text
but is too slow for this many users), then in a fresh child process each reads them:

* ``all``: every user (``partition: {type: natural}``);
* ``sample``: ``--sample`` users drawn from the seed, read users first;
* ``sample-after-reading-all``: the same users chosen the way it was done before, after
  reading every user (``read_tff_h5`` without a choice, then ``natural_dataset``).

and prints the process's peak resident memory (``ru_maxrss``) and its resident memory
after the imports, before reading, so the difference is what the reading cost.

    python benchmarks/stackoverflow_memory.py [--users 20000 --mean 50 --sample 500]
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _rss_mib() -> float:
    """Resident memory now, MiB (Linux ``/proc/self/statm``)."""
    import os

    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def write(root: Path, users: int, mean: int) -> None:
    """The train and test files and the word counts (module docstring), seed 0."""
    import h5py
    import numpy as np

    from fedclock.scenarios.data.stackoverflow import WORD_COUNTS

    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(150)])
    (root / WORD_COUNTS).write_text("".join(f"{w} {1000 - k}\n" for k, w in enumerate(words)))
    sizes = np.maximum(1, np.round(mean * rng.lognormal(0.0, 0.8, users) / np.exp(0.32))).astype(int)
    text = h5py.string_dtype("utf-8")
    with h5py.File(root / "stackoverflow_train.h5", "w") as train, \
            h5py.File(root / "stackoverflow_test.h5", "w") as test:
        for u, n in enumerate(sizes):
            lengths = rng.integers(5, 25, n + 1)
            picks = rng.integers(0, len(words), int(lengths.sum()))
            cuts = np.split(words[picks], np.cumsum(lengths)[:-1])
            sentences = np.array([" ".join(c) for c in cuts], dtype=object)
            train.create_dataset(f"examples/{u:08d}/tokens", data=sentences[:-1], dtype=text)
            test.create_dataset(f"examples/{u:08d}/tokens", data=sentences[-1:], dtype=text)


def one(root: Path, mode: str, users: int, sample: int) -> None:
    """Read the files in one mode here and print the figures."""
    import torch

    from fedclock.scenarios.data.client_files import load_client_files, natural_dataset
    from fedclock.scenarios.schema import DatasetConfig
    from fedclock.scenarios.data.tff_h5 import read_tff_h5

    import h5py  # noqa: F401 - imported before the baseline, as reading imports it

    torch.set_num_threads(1)
    partition: dict[str, object] = {"type": "natural"}
    if mode != "all":
        partition["sample_clients"] = sample
    cfg = DatasetConfig(name="stackoverflow", format="tff_h5", root=root, partition=partition)
    before = _rss_mib()
    start = time.perf_counter()
    kept = users if mode == "all" else sample
    if mode == "sample-after-reading-all":
        every, classes = read_tff_h5("stackoverflow", root)
        data = natural_dataset(cfg, every, classes, 0, kept, root)
        del every
    else:
        data = load_client_files(cfg, 0, kept)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| {mode} | {kept:,} | {len(data.y_train):,} | {before:.0f} MiB | {peak:.0f} MiB | "
          f"{peak - before:.0f} MiB | {seconds:.1f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--mean", type=int, default=50)
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(Path(args.one[0]), args.one[1], args.users, args.sample)
        return
    with tempfile.TemporaryDirectory(prefix="so-memory-") as tmp:
        start = time.perf_counter()
        write(Path(tmp), args.users, args.mean)
        size = sum(f.stat().st_size for f in Path(tmp).iterdir()) / 2**20
        print(f"wrote {args.users:,} users ({size:.0f} MiB of files) in {time.perf_counter() - start:.0f} s")
        print("| mode | users kept | train sentences | RSS before reading | peak RSS | peak - before | seconds |")
        print("|---|---|---|---|---|---|---|")
        for mode in ("all", "sample", "sample-after-reading-all"):
            subprocess.run([sys.executable, __file__, "--one", tmp, mode, "--users", str(args.users),
                            "--sample", str(args.sample)], check=True)


if __name__ == "__main__":
    main()
