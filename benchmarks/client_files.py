"""Client files at scale: memory per client of a naturally partitioned federation.

Every user of a client-file data set (:mod:`fedclock.scenarios.data.client_files`) shares one
pool tensor; a client costs its train and test index arrays. This measures, for 10,000,
100,000 and 1,000,000 users of 2 training and 1 test sample each (60 features, LEAF
Synthetic's shape), the bytes the built federation keeps beyond its samples, per client
(tracemalloc: the index arrays and lists; the samples sit in torch tensors it does not
trace), and the NumPy-side peak during the build (the pooled arrays, concatenated once);
and the seconds to read a generated LEAF file of 10,000 users through the reader. Each
size runs in a fresh child process.

    python benchmarks/client_files.py [--users 10000 100000 1000000]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def one(users: int) -> None:
    """Build one federation here and print its figures."""
    import numpy as np

    from fedclock.scenarios.data.client_files import natural_dataset
    from fedclock.scenarios.data.federation import with_own_tests
    from fedclock.scenarios.schema import DatasetConfig
    from fedclock.scenarios.data.user_data import UserData

    cfg = DatasetConfig(name="synthetic_leaf", format="leaf", partition={"type": "natural"})
    rng = np.random.default_rng(0)
    made = [UserData(f"u{i}", rng.normal(size=(2, 60)).astype(np.float32), rng.integers(0, 10, 2),
                     rng.normal(size=(1, 60)).astype(np.float32), rng.integers(0, 10, 1)) for i in range(users)]
    tracemalloc.start()
    fed = with_own_tests(natural_dataset(cfg, made, 10, 0, users, Path("memory")))
    del made
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    samples = fed.x.numel() * 4 + fed.y.numel() * 8  # torch's allocations, which tracemalloc does not see
    print(f"{users} users: {kept / users:.0f} B per client kept beyond the samples ({samples / users:.0f} B of "
          f"samples each, in the shared tensors), build peak {peak / 2**20:.0f} MiB (NumPy side)")


def read_generated(users: int) -> None:
    """Seconds to generate and read a LEAF file of ``users`` users through the reader."""
    from fedclock.scenarios.data.leaf import read_leaf
    from fedclock.scenarios.data.leaf_generate import synthetic_samples, write_leaf
    from fedclock.scenarios.schema import GeneratedFiles

    with tempfile.TemporaryDirectory() as tmp:
        write_leaf(Path(tmp), synthetic_samples, GeneratedFiles(users=users, mean_samples=4), 0)
        start = time.perf_counter()
        read_leaf("synthetic_leaf", Path(tmp))
        print(f"read {users} LEAF users (JSON, ~5 samples each): {time.perf_counter() - start:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--read", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one)
        return
    if args.read:
        read_generated(args.read)
        return
    for users in args.users:
        subprocess.run([sys.executable, __file__, "--one", str(users)], check=True)
    subprocess.run([sys.executable, __file__, "--read", "10000"], check=True)


if __name__ == "__main__":
    main()
