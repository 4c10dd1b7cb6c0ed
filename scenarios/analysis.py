"""Post-run analyses a scenario can ask for (``analysis:``), written beside the results.

``analysis: cka`` (or ``{type: cka, samples: 256}``): after the last round, every client
(or the listed ones) trains once more from the final global model with its stored state,
exactly as in a task but without changing anything, and the linear CKA per layer between
that local model and the global model is measured on the client's first ``samples``
training inputs (:mod:`fedclock.algorithms.cka`). Rows (client, layer, layer_index, cka,
version, round; the last two as in metrics.parquet) go to ``cka.parquet`` in the run's output
folder. The extra local training is seeded by (scenario seed, task stream, client, :data:`ANALYSIS_TASK`), so it never
collides with a real task's randomness.

With ``at_rounds: [1, 10]`` the same measurement is made instead right after the evaluation
at each of those server versions (:class:`CKAAtVersions`; the clock evaluates there, from the
global model and the clients' stored states of that moment), and ``cka.parquet`` is
rewritten (atomically) after each, so a crash keeps
the measurements made so far. A resumed run keeps the rows measured before its checkpoint.
Version 0 is allowed: the clients train once from the initial model, which is compared with
that model. FedReCo's Fig. 2 (full version, Sec. 3.1) compares the local model after the local
training of round t with the global model omega^t *before* aggregation, i.e. the model the
round started from: its "round 1" is version 0 and its "round 10" version 9.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.cka import layer_cka, layer_names, local_model_after_training, supports_local_model
from fedclock.scenarios.data.federation import Federation
from fedclock.scenarios.runfiles import CKA_FILE
from fedclock.scenarios.schema import CKAAnalysis, Scenario
from fedclock.scheduling.rng import Stream, torch_rng

ANALYSIS_TASK = 2**40
"""Task index of the analysis' extra local training (beyond any real task's index)."""

CKA_SCHEMA = pa.schema([("client", pa.int64()), ("layer", pa.string()), ("layer_index", pa.int64()),
                        ("cka", pa.float64()), ("version", pa.int64()), ("round", pa.int64())])


def analysis_problem(algorithm: type[Algorithm], cfg: CKAAnalysis | None) -> str | None:
    """A one-line error when the scenario's analysis cannot run with this algorithm."""
    if cfg is not None and not supports_local_model(algorithm):
        return (f"analysis: cka needs an algorithm whose clients keep a local model (FedAvg and its variants, "
                f"or one defining local_model); {algorithm.name!r} does not")
    return None


def cka_rows(algorithm: Algorithm, federation: Federation, cfg: CKAAnalysis, seed: int, version: int,
             payload_for: Any, state_for: Any, round_index: int | None = None) -> list[dict[str, Any]]:
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
                         "version": int(version), "round": None if round_index is None else int(round_index)})
    return rows


def _session_access(session: Any) -> tuple[Any, Any]:
    """``payload_for(c)`` and ``state_for(c)`` reading a session's current payloads and kept states."""
    t = session.t

    def payload_for(c: int) -> Any:
        return session.payload(c)

    def state_for(c: int) -> Any:
        handle = session.kept_state(c)
        return None if handle is None else t.get(handle)

    return payload_for, state_for


def write_cka(rows: Sequence[dict[str, Any]], out_dir: Path) -> Path:
    """Write ``cka.parquet`` atomically (temporary file, then rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / CKA_FILE
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(list(rows), schema=CKA_SCHEMA), tmp)
    os.replace(tmp, path)
    return path


def run_analysis(scenario: Scenario, algorithm: Algorithm, federation: Federation, session: Any,
                 out_dir: Path, round_index: int | None = None) -> Path | None:
    """Run the scenario's end-of-run analysis on a finished session and write its file; None
    if the scenario asks for none or measures at chosen versions (:class:`CKAAtVersions`)."""
    cfg = scenario.analysis
    if cfg is None or cfg.at_rounds is not None:
        return None
    payload_for, state_for = _session_access(session)
    rows = cka_rows(algorithm, federation, cfg, scenario.seed, session.version, payload_for, state_for, round_index)
    return write_cka(rows, out_dir)


class CKAAtVersions:
    """``analysis.at_rounds``: called by the session at the end of each evaluation it computes
    (not one replayed from a checkpoint's log), it measures CKA once for each chosen version
    the server has reached and not yet been measured at, and rewrites ``cka.parquet``; the
    rows' round is ``round_now()`` (the clock's). ``resume_version``: the run goes on from a
    checkpoint of that version; rows measured before it are kept from the file."""

    def __init__(self, scenario: Scenario, algorithm: Algorithm, federation: Federation, session: Any,
                 out_dir: Path, round_now: Callable[[], int], resume_version: int | None = None) -> None:
        assert scenario.analysis is not None and scenario.analysis.at_rounds is not None
        self.cfg = scenario.analysis
        self.seed = scenario.seed
        self.algorithm, self.federation, self.session, self.out_dir = algorithm, federation, session, out_dir
        self.round_now = round_now
        self.rows: list[dict[str, Any]] = []
        path = out_dir / CKA_FILE
        if resume_version is not None and path.is_file():
            self.rows = [r for r in pq.read_table(path).to_pylist() if r["version"] < resume_version]
        measured = max((r["version"] for r in self.rows), default=-1)
        self.pending = sorted(v for v in set(scenario.analysis.at_rounds) if v > measured)
        write_cka(self.rows, out_dir)

    def __call__(self) -> None:
        version, round_index = self.session.version, self.round_now()
        due = [v for v in self.pending if v <= version]
        if not due:
            return
        self.pending = [v for v in self.pending if v > version]
        payload_for, state_for = _session_access(self.session)
        self.rows += cka_rows(self.algorithm, self.federation, self.cfg, self.seed, version, payload_for, state_for,
                              round_index)
        write_cka(self.rows, self.out_dir)
