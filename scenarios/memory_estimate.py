"""Whether a scenario fits in this machine's memory, estimated before anything is allocated.

No size of a population or of generated data is capped by a constant: a scenario is refused
(one line naming the field and the estimate) only when its estimated peak memory exceeds the
memory of the machine validating it (:func:`machine_memory`: physical memory, or the cgroup's
limit when lower). The estimate is the sum of

* the process's fixed cost (``import torch``, fedclock's imports, pyarrow's pandas, the first
  task's FLOP count: :data:`FIXED_B`, or :data:`RAY_FIXED_B` for Ray's processes),
* the per-client cost of the scheduling and the results (:data:`PER_CLIENT_B`, more on Ray:
  :data:`RAY_PER_CLIENT_B`), plus per-client extras for an availability model
  (:data:`PER_CLIENT_AVAILABILITY_B`) and a selector's history (:data:`PER_CLIENT_SELECTOR_B`),
* the data where it can be known from the settings alone (generated synthetic data: every
  sample's float32 features and int64 label, :func:`synthetic_bytes`); other datasets are
  read from files and are not estimated here.

The per-client figures are peaks measured by ``benchmarks/scale.py`` (``benchmarks/RESULTS.md``,
"Ten million clients"), rounded up; the commands are given beside each constant.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FIXED_B", "PER_CLIENT_B", "PER_CLIENT_AVAILABILITY_B", "PER_CLIENT_SELECTOR_B", "RAY_FIXED_B",
           "RAY_PER_CLIENT_B", "SYNTHETIC_MIN_PER_CLIENT", "estimated_bytes", "machine_memory", "memory_problem",
           "synthetic_bytes"]

MiB = 2**20

FIXED_B = 800 * MiB
"""The inline process's fixed cost: peak RSS less the data at 10^4 clients, 793 MiB
(``python benchmarks/scale.py --backend inline --clients 10000 1000000 --cohort 10 --rounds 1
--features 20``, ``benchmarks/RESULTS.md``, "Idle clients, third pass")."""
PER_CLIENT_B = 220
"""Inline, every client always available, uniform selection: peak RSS beyond the data and the
fixed cost, per client: 157-167 B for a whole run at 10^6 (the command of :data:`FIXED_B`), 201 B
for the population alone (``python benchmarks/scale.py --population-only --clients 10000 1000000
--cohort 100 --rounds 20``), rounded up."""
PER_CLIENT_AVAILABILITY_B = 60
"""Extra per client with diurnal availability kept as arrays (``phases: population``): 56 B
(phases, the cycle order and points, the marks and their Fenwick tree: ``python
benchmarks/scale.py --population-only --availability diurnal --clients 10000 1000000 --cohort 100
--rounds 20``, 257 B against 201 B always available)."""
PER_CLIENT_OBJECT_AVAILABILITY_B = 350
"""Extra per client with one availability object per client (Markov, trace replay, diurnal with
per-client phases) and the index's heap entry: 345 B (``python benchmarks/scale.py
--population-only --availability diurnal_client --clients 10000 200000 --cohort 100 --rounds
20``, 546 B against 201 B)."""
PER_CLIENT_SELECTOR_B = 130
"""Extra per client with a selector other than uniform: its history's flat arrays
(``ClientHistory``) and Oort's sorted copies: 128 B (``python benchmarks/scale.py
--population-only --selection oort --clients 10000 1000000 --cohort 100 --rounds 20``, 329 B
against 201 B; measured when Oort also kept two 8-byte copies per client, which it no longer
does since issue 50's selection pass: an upper bound now)."""
RAY_FIXED_B = 2000 * MiB
"""Ray's processes (driver, GCS, raylet, two executors, the server actor): peak PSS less the
data at 10^4 clients, 1,968 MiB (``python benchmarks/scale.py --backend ray --clients 10000
100000 --cohort 10 --rounds 1 --features 20``, "Idle clients, third pass")."""
RAY_PER_CLIENT_B = 1200
"""On Ray, per client: peak PSS beyond the data and the fixed cost, 1,126 B at 10^6 (the
command of :data:`RAY_FIXED_B` at ``--clients 1000000``)."""
SYNTHETIC_MIN_PER_CLIENT = 4
"""Synthetic data raise every client to at least this many samples
(:func:`fedclock.scenarios.data.datasets.load_synthetic`)."""


def synthetic_bytes(samples: int, features: int) -> int:
    """Bytes of ``samples`` synthetic samples (training pool and test set together): float32
    features and an int64 label each."""
    return samples * (4 * features + 8)


def estimated_bytes(num_clients: int, data_bytes: int, *, ray: bool = False, availability: str = "always",
                    selector: bool = False) -> int:
    """Estimated peak memory of a run: fixed cost, clients and data (module docstring).
    ``availability``: ``always`` (or round-driven models), ``arrays`` (indexed as arrays) or
    ``objects`` (one model object per client)."""
    per_client = RAY_PER_CLIENT_B if ray else PER_CLIENT_B
    per_client += {"always": 0, "arrays": PER_CLIENT_AVAILABILITY_B,
                   "objects": PER_CLIENT_OBJECT_AVAILABILITY_B}[availability]
    per_client += PER_CLIENT_SELECTOR_B if selector else 0
    return (RAY_FIXED_B if ray else FIXED_B) + num_clients * per_client + data_bytes


def machine_memory() -> int:
    """This machine's memory in bytes: physical memory, or the cgroup's limit when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            text = limit_file.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB"


def memory_problem(num_clients: int, data_bytes: int, data_field: str, *, ray: bool = False,
                   availability: str = "always", selector: bool = False,
                   memory: int | None = None) -> str | None:
    """A one-line error naming the field (``population.num_clients``, or ``data_field`` when the
    data weigh more than the clients) when the estimate exceeds ``memory`` (default
    :func:`machine_memory`); None when it fits."""
    need = estimated_bytes(num_clients, data_bytes, ray=ray, availability=availability, selector=selector)
    have = machine_memory() if memory is None else memory
    if need <= have:
        return None
    clients = need - data_bytes - (RAY_FIXED_B if ray else FIXED_B)
    field = data_field if data_bytes > clients else "population.num_clients"
    return (f"{field}: {num_clients:,} clients and their data need about {_gib(need)} (clients {_gib(clients)}, "
            f"data {_gib(data_bytes)}, fixed {_gib(RAY_FIXED_B if ray else FIXED_B)}; estimated before "
            f"allocating), more than this machine's {_gib(have)} of memory; use fewer clients or samples")
