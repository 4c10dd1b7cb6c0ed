"""Counted cost of one task of every run of a scenario file: GFLOP per task, peak training
memory, the compute seconds of a task on the file's device (its constant
``devices.compute``, in GFLOP/s), and the virtual seconds of a sync round.

The round is what the clock charges a sync round whose cohort is the whole population, every
client holding ``--samples`` training samples: the slowest client's task (download, compute,
upload on its drawn device, :func:`fedclock.scheduling.devices.task_timing`, with the bytes
and work :func:`fedclock.scenarios.experiment.task_costs` gives the clock) plus, with
``server.compute_gflops``, the server's step on every client's upload
(:mod:`fedclock.algorithms.server_cost`). "-" where the file's mode is not such a round.

The dataset is not loaded: the input shape, the class count and the client size are given
on the command line (what the file's dataset and partition give every client), so the
table comes out in minutes on a CPU without the data. Example (FedReCo Table 2's header)::

    python benchmarks/task_cost_table.py fedreco/table2_time_cifar10 --input-shape 3,32,32 --classes 10 --samples 840
"""
from __future__ import annotations

import argparse

import torch

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.server_cost import count_server_step
from fedclock.algorithms.task_cost import TaskCost
from fedclock.scenarios.api import resolve_path
from fedclock.scenarios.experiment import task_costs
from fedclock.scenarios.loader import load_suite
from fedclock.scenarios.plugins import algorithm_class, model_builder
from fedclock.scenarios.schema import Scenario
from fedclock.scheduling.devices import Devices, task_timing
from fedclock.scheduling.modes import SyncMode


def round_seconds(run: Scenario, algorithm: Algorithm, cost: TaskCost, samples: int) -> float | None:
    """Virtual seconds of a sync round over the whole population (module docstring); None
    when the run's mode is not one."""
    mode = run.mode
    if not isinstance(mode, SyncMode) or mode.cohort_size is not None or mode.cohort_fraction is not None:
        return None
    costs = task_costs(algorithm, cost, run.population.compute_unit)
    devices = Devices.draw(run.population, run.seed)
    work = costs.work(samples)
    slowest = max(task_timing(devices[c], costs.bytes_down, costs.bytes_up, work).total_s
                  for c in range(len(devices)))
    speed = run.server.compute_gflops
    server = 0.0 if speed is None else count_server_step(algorithm, len(devices), num_samples=samples) / (speed * 1e9)
    return slowest + server


def row(run: Scenario, input_shape: tuple[int, ...], classes: int, samples: int) -> str:
    factory = ModelFactory(run.model.name, input_shape, classes, tuple(run.model.hidden),
                           builder=model_builder(run.model.name, run.plugin_dir))
    algorithm = algorithm_class(run.algorithm.name, run.plugin_dir)(run.algorithm.params, factory)
    algorithm.num_clients = run.population.num_clients
    cost = TaskCost(algorithm)
    gflop = float(cost.flops(samples)) / 1e9
    compute = run.population.devices.compute
    seconds = f"{gflop / compute:10.4f}" if isinstance(compute, float) else "         -"
    per_round = round_seconds(run, algorithm, cost, samples)
    round_text = "-" if per_round is None else f"{per_round:.4f}"
    return (f"| {run.name:10s} | {run.algorithm.name:10s} | {gflop:10.3f} | {seconds} | {round_text:>10s} | "
            f"{cost.memory_bytes(samples) / 2**20:8.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--input-shape", required=True, help="e.g. 3,32,32")
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--samples", type=int, required=True, help="training samples of a client")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shape = tuple(int(d) for d in args.input_shape.split(","))
    suite = load_suite(resolve_path(args.scenario))
    print("| run | algorithm | GFLOP per task | compute s per task | virtual s per round | peak MiB |")
    print("|---|---|---|---|---|---|")
    for run in suite.runs:
        print(row(run, shape, args.classes, args.samples), flush=True)


if __name__ == "__main__":
    main()
