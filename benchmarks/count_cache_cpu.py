"""CPU and wall seconds of counting a task's FLOPs and memory (FedAvg on ``pfl_cnn``, 3x32x32,
batch 10, a 50-sample client: the probes :class:`fedclock.algorithms.task_cost.TaskCost` makes),
and whether the process imported PyTorch's compiler (``torch._dynamo``) to do it.

    FEDCLOCK_CACHE_DIR=off python benchmarks/count_cache_cpu.py      # counted (before the cache)
    python benchmarks/count_cache_cpu.py; python benchmarks/count_cache_cpu.py   # filled, then read
"""
from __future__ import annotations

import resource
import sys
import time


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    from fedclock.algorithms.fedavg import FedAvg
    from fedclock.algorithms.models import ModelFactory
    from fedclock.algorithms.task_cost import TaskCost

    cost = TaskCost(FedAvg(FedAvg.Params(batch_size=10, lr=0.1), ModelFactory("pfl_cnn", (3, 32, 32), 10)))
    cpu, wall = cpu_seconds(), time.time()
    flops, memory = cost.flops(50), cost.memory_bytes(50)
    print(f"flops {float(flops) / 1e9:.3f} GFLOP, memory {memory / 2**20:.1f} MiB; counting CPU "
          f"{cpu_seconds() - cpu:.2f} s wall {time.time() - wall:.2f} s; torch._dynamo imported: "
          f"{'torch._dynamo' in sys.modules}")


if __name__ == "__main__":
    main()
