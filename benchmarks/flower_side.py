"""Flower's side of the end-to-end benchmarks (``e2e.py`` and ``pfl_cifar10.py``), built once.

:func:`run_flower` runs FedAvg in Flower's simulation engine (its Message API: a ``ClientApp``
whose train handler loads the global arrays, runs the script's local SGD on the client's slice
and returns the arrays; a ``ServerApp`` running the ``FedAvg`` strategy with a central
evaluation before the first round and after the last; one CPU per client actor). What differs
between the scripts comes in as callables: how the data are read, the model built, a client
trained and the model evaluated, and what to record at a task and at a round's end. Each
client actor process reads the training data and builds its model once (kept in a module,
so they outlive a call). Client ``c`` of round ``r`` trains on samples ``c*s:(c+1)*s`` with
the seed ``r * 100_000 + c``, as the scripts' plain loops do.

Imported only by a script's Flower child, under an interpreter with ``flwr[simulation]``
(the scripts' virtual environments); the functions given are pickled to Flower's actors by
value when they are the script's own (its ``__main__``).
"""
from __future__ import annotations

import logging
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent


def run_flower(*, clients: int, cohort: int, rounds: int, samples: int, read: Callable[[], tuple[Any, Any, Any, Any]],
               build_model: Callable[[], Any], train: Callable[[Any, Any, Any, int], None],
               evaluate: Callable[[Any, Any, Any], float], on_task: Callable[[], None] | None = None,
               on_round_end: Callable[[], None] | None = None) -> list[float]:
    """FedAvg over ``clients`` Flower supernodes, ``cohort`` of them a round, for ``rounds``
    rounds (module docstring); the central accuracies before the first round and after the
    last. ``read``: the data as NumPy arrays ``(x_train, y_train, x_test, y_test)``;
    ``train(model, x, y, seed)``: one client's local SGD in place; ``on_task``: called in the
    actor at every task; ``on_round_end``: in the server after every round."""
    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    # Flower's actors import this module by name when they unpickle the apps below
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    client_app = ClientApp()

    @client_app.train()
    def client_train(msg: Message, context: Context) -> Message:
        if on_task is not None:
            on_task()
        # one copy of the data and model per client actor process (a module, so it outlives this call)
        cache = sys.modules.setdefault("_bench_flower_cache", types.ModuleType("_bench_flower_cache"))
        if not hasattr(cache, "data"):
            torch.set_num_threads(1)
            x_tr, y_tr, _, _ = read()
            cache.data = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
            cache.model = build_model()
        model, (x, y) = cache.model, cache.data
        c = int(context.node_config["partition-id"])
        r = int(msg.content["config"]["server-round"])
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        train(model, x[c * samples:(c + 1) * samples], y[c * samples:(c + 1) * samples], r * 100_000 + c)
        return Message(content=RecordDict({"arrays": ArrayRecord(model.state_dict()),
                                           "metrics": MetricRecord({"num-examples": samples})}), reply_to=msg)

    server_app = ServerApp()
    accuracy: list[float] = []

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        _, _, x_np, y_np = read()
        x_te, y_te = torch.from_numpy(x_np), torch.from_numpy(y_np)
        torch.manual_seed(0)
        model = build_model()

        def central(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            if server_round > 0 and on_round_end is not None:
                on_round_end()
            if server_round not in (0, rounds):
                return None
            model.load_state_dict(arrays.to_torch_state_dict())
            accuracy.append(evaluate(model, x_te, y_te))
            return MetricRecord({"accuracy": accuracy[-1]})

        strategy = FedAvg(fraction_train=cohort / clients, fraction_evaluate=0.0, min_train_nodes=cohort,
                          min_available_nodes=clients)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=rounds,
                       evaluate_fn=central)

    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    return accuracy
