"""Counted cost of one task of every run of a scenario file: GFLOP per task, peak training
memory, and the compute seconds of a task on the file's device (its constant
``devices.compute``, in GFLOP/s).

The dataset is not loaded: the input shape, the class count and the client size are given
on the command line (what the file's dataset and partition give every client), so the
table comes out in minutes on a CPU without the data. Example (FedReCo Table 2's header)::

    python benchmarks/task_cost_table.py fedreco/table2_time_cifar10 --input-shape 3,32,32 --classes 10 --samples 840
"""
from __future__ import annotations

import argparse

import torch

from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.task_cost import TaskCost
from fedclock.scenarios.api import resolve_path
from fedclock.scenarios.loader import load_suite
from fedclock.scenarios.plugins import algorithm_class, model_builder
from fedclock.scenarios.schema import Scenario


def row(run: Scenario, input_shape: tuple[int, ...], classes: int, samples: int) -> str:
    factory = ModelFactory(run.model.name, input_shape, classes, tuple(run.model.hidden),
                           builder=model_builder(run.model.name, run.plugin_dir))
    algorithm = algorithm_class(run.algorithm.name, run.plugin_dir)(run.algorithm.params, factory)
    algorithm.num_clients = run.population.num_clients
    cost = TaskCost(algorithm)
    gflop = float(cost.flops(samples)) / 1e9
    compute = run.population.devices.compute
    seconds = f"{gflop / compute:10.4f}" if isinstance(compute, float) else "         -"
    return (f"| {run.name:10s} | {run.algorithm.name:10s} | {gflop:10.3f} | {seconds} | "
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
    print("| run | algorithm | GFLOP per task | compute s per task | peak MiB |")
    print("|---|---|---|---|---|")
    for run in suite.runs:
        print(row(run, shape, args.classes, args.samples), flush=True)


if __name__ == "__main__":
    main()
