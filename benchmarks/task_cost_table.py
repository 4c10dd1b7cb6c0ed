"""Counted cost of one task of every run of a scenario file: GFLOP per task, peak training
memory, the compute seconds of a task on the file's device (its constant
``devices.compute``, in GFLOP/s), and the virtual seconds of a sync round.

The round is what the clock charges a sync round whose cohort is the whole population, every
client holding ``--samples`` training samples: the slowest client's task (download, compute,
upload on its drawn device, :func:`fedclock.scheduling.devices.task_timing`, with the bytes
and work :func:`fedclock.scenarios.experiment.task_costs` gives the clock) plus, with
``server.compute_gflops``, the server's step on every client's upload, charged as a run
charges it: the server is followed on meta tensors from round to round
(:class:`fedclock.algorithms.server_cost.ServerSteps`, what
:class:`fedclock.scenarios.run_costs.FollowedServer` does in a run), each task told at its
dispatch what it uploads, so a step costs what it does from the state the server is in (an
SPFL similarity refresh and a model update each their own work). The column is the mean
round over the run's ``stop.rounds`` rounds (``--rounds`` to follow fewer or more; one round
when the file stops otherwise): a run of ``R`` rounds takes ``R`` times it. "-" where the
file's mode is not such a round. The algorithm is made as a run makes it
(:func:`fedclock.scenarios.experiment.make_algorithm`: its server optimizer, its links'
compression), so its bytes and its server's work are the run's.

The dataset is not loaded: the input shape, the class count and the client size are given
on the command line (what the file's dataset and partition give every client), so the
table comes out in minutes on a CPU without the data. Example (FedReCo Table 2's header)::

    python benchmarks/task_cost_table.py fedreco/table2_time_cifar10 --input-shape 3,32,32 --classes 10 --samples 840
"""
from __future__ import annotations

import argparse
from fractions import Fraction

import torch

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.compressed import with_links
from fedclock.algorithms.models import ModelFactory
from fedclock.algorithms.server_cost import ArrivalInfo, ServerCost
from fedclock.algorithms.task_cost import TaskCost
from fedclock.scenarios.api import resolve_path
from fedclock.scenarios.experiment import task_costs
from fedclock.scenarios.loader import load_suite
from fedclock.scenarios.plugins import algorithm_class, model_builder
from fedclock.scenarios.schema import Scenario
from fedclock.scheduling.devices import Devices, task_timing
from fedclock.scheduling.modes import SyncMode


def server_flops_per_round(algorithm: Algorithm, clients: int, samples: int, rounds: int) -> Fraction:
    """Mean FLOPs of the server's step over ``rounds`` sync rounds of every one of ``clients``
    clients (``samples`` each), as a run charges them: the server followed from its initial
    state, each task told what it uploads at its dispatch (after as many server steps as
    rounds before it), its arrivals folded in client order, on time (module docstring)."""
    followed = ServerCost(algorithm).follow()
    total = 0
    for done in range(rounds):
        version = followed.state.version
        kinds = [followed.upload_kind(c, done) for c in range(clients)]
        total += followed.step([ArrivalInfo(client=c, num_samples=samples, version_dispatched=version, staleness=0,
                                            upload=kind) for c, kind in enumerate(kinds)])
    return Fraction(total, rounds)


def round_seconds(run: Scenario, algorithm: Algorithm, cost: TaskCost, samples: int,
                  rounds: int | None = None) -> float | None:
    """Mean virtual seconds of a sync round over the whole population, over ``rounds`` rounds
    (None: the run's ``stop.rounds``, else one) (module docstring); None when the run's mode
    is not such a round."""
    mode = run.mode
    if not isinstance(mode, SyncMode) or mode.cohort_size is not None or mode.cohort_fraction is not None:
        return None
    costs = task_costs(algorithm, cost, run.population.compute_unit)
    devices = Devices.draw(run.population, run.seed)
    work = costs.work(samples)
    slowest = max(task_timing(devices[c], costs.bytes_down, costs.bytes_up, work).total_s
                  for c in range(len(devices)))
    speed = run.server.compute_gflops
    if speed is None:
        return slowest
    followed = rounds if rounds is not None else run.stop.rounds if run.stop.rounds is not None else 1
    return slowest + float(server_flops_per_round(algorithm, len(devices), samples, followed)) / (speed * 1e9)


def row(run: Scenario, input_shape: tuple[int, ...], classes: int, samples: int, rounds: int | None = None) -> str:
    factory = ModelFactory(run.model.name, input_shape, classes, tuple(run.model.hidden),
                           builder=model_builder(run.model.name, run.plugin_dir))
    algorithm = algorithm_class(run.algorithm.name, run.plugin_dir)(run.algorithm.params, factory)
    algorithm.num_clients = run.population.num_clients
    algorithm.server_optimizer = run.algorithm.server_optimizer  # as a run's (experiment.make_algorithm)
    algorithm = with_links(algorithm, run.upload, run.download)
    cost = TaskCost(algorithm)
    gflop = float(cost.flops(samples)) / 1e9
    compute = run.population.devices.compute
    seconds = f"{gflop / compute:10.4f}" if isinstance(compute, float) else "         -"
    per_round = round_seconds(run, algorithm, cost, samples, rounds)
    round_text = "-" if per_round is None else f"{per_round:.4f}"
    return (f"| {run.name:10s} | {run.algorithm.name:10s} | {gflop:10.3f} | {seconds} | {round_text:>10s} | "
            f"{cost.memory_bytes(samples) / 2**20:8.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--input-shape", required=True, help="e.g. 3,32,32")
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--samples", type=int, required=True, help="training samples of a client")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds the server is followed over (default: the file's stop.rounds, else 1)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shape = tuple(int(d) for d in args.input_shape.split(","))
    suite = load_suite(resolve_path(args.scenario))
    print("| run | algorithm | GFLOP per task | compute s per task | virtual s per round (mean) | peak MiB |")
    print("|---|---|---|---|---|---|")
    for run in suite.runs:
        print(row(run, shape, args.classes, args.samples, args.rounds), flush=True)


if __name__ == "__main__":
    main()
