"""Post-run analyses a scenario can ask for (``analysis:``), written beside the results.

``analysis: cka`` (or ``{type: cka, samples: 256}``): after the last round, every client
(or the listed ones) trains once more from the final global model with its stored state,
exactly as in a task but without changing anything, and the linear CKA per layer between
that local model and the global model is measured on the client's first ``samples``
training inputs (:mod:`fedclock.algorithms.cka`). Rows (client, layer, layer_index, cka,
version) go to ``cka.parquet`` in the run's output folder. The extra local training is
seeded by (scenario seed, task stream, client, :data:`ANALYSIS_TASK`), so it never
collides with a real task's randomness.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.cka import layer_cka, layer_names, local_model_after_training, supports_local_model
from fedclock.scenarios.federation import Federation
from fedclock.scenarios.schema import CKAAnalysis, Scenario
from fedclock.scheduling.rng import Stream, torch_rng

ANALYSIS_TASK = 2**40
"""Task index of the analysis' extra local training (beyond any real task's index)."""

CKA_SCHEMA = pa.schema([("client", pa.int64()), ("layer", pa.string()), ("layer_index", pa.int64()),
                        ("cka", pa.float64()), ("version", pa.int64())])


def analysis_problem(algorithm: type[Algorithm], cfg: CKAAnalysis | None) -> str | None:
    """A one-line error when the scenario's analysis cannot run with this algorithm."""
    if cfg is not None and not supports_local_model(algorithm):
        return (f"analysis: cka needs an algorithm whose clients keep a local model (FedAvg and its variants, "
                f"or one defining local_model); {algorithm.name!r} does not")
    return None


def cka_rows(algorithm: Algorithm, federation: Federation, cfg: CKAAnalysis, seed: int, version: int,
             payload_for: Any, state_for: Any) -> list[dict[str, Any]]:
    """CKA rows for the clients of ``cfg``; ``payload_for(c)`` and ``state_for(c)`` give the
    final payload and stored state of client c."""
    factory = algorithm.model_factory
    model = factory.build()
    order = {name: i for i, name in enumerate(layer_names(model))}
    clients = cfg.clients if cfg.clients is not None else range(federation.num_clients)
    rows: list[dict[str, Any]] = []
    for c in clients:
        data = federation.client_data(c)
        if data.num_train == 0:
            continue
        payload = payload_for(c)
        local = local_model_after_training(algorithm, payload, state_for(c), data,
                                           torch_rng(seed, Stream.TASK, c, ANALYSIS_TASK))
        x = data.x_train[:cfg.samples]
        for layer, value in layer_cka(model, factory, local, payload["weights"], x).items():
            rows.append({"client": int(c), "layer": layer, "layer_index": order[layer], "cka": value,
                         "version": int(version)})
    return rows


def run_analysis(scenario: Scenario, algorithm: Algorithm, federation: Federation, session: Any,
                 out_dir: Path) -> Path | None:
    """Run the scenario's analysis on a finished session and write its file; None if the
    scenario asks for none."""
    cfg = scenario.analysis
    if cfg is None:
        return None
    t = session.t

    def payload_for(c: int) -> Any:
        return session.payload(c)

    def state_for(c: int) -> Any:
        handle = session.client_state.get(c)
        return None if handle is None else t.get(handle)

    rows = cka_rows(algorithm, federation, cfg, scenario.seed, session.version, payload_for, state_for)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "cka.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=CKA_SCHEMA), path)
    return path
