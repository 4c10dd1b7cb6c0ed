"""The final linear evaluation of a self-supervised run, as the FedStyle paper defines it.

* **Generalization**, per style domain: the frozen global representation
  (``algorithm.global_representation(state)``, FedStyle: the global f_c) and a linear
  classifier trained on *all* of the domain's training pool (every client's share,
  train and test splits alike), tested on the domain's global test set.
* **Personalization**, per client: the client's frozen representation and trainable
  adapter (``algorithm.personal_probe(payload, client_state)``; FedStyle: its local
  ``[f_c, f_s]`` frozen and its generator G trained with the classifier) and a linear
  classifier trained on the client's train split ("on local data only"), tested "on the
  corresponding testing data in each style dataset": the global test set of the client's
  domain, as generalization is (the client's own test split, if any, is not used); a
  domain's figure is the mean over its clients. FedStyle's ``probe_style: swapped`` control
  gets the state of the next client (id order, wrapping round) as the donor of its style
  encoder. The single client of a Centralized
  federation (domain :data:`~fedclock.scenarios.domains.ALL_DOMAINS`) has no
  personalization rows.

Both are averaged over domains. A federation without domains counts as one domain
``all``. Rows go to ``linear_eval.parquet`` in the run directory with columns ``kind``
(generalization | personalization), ``domain`` (a domain's name or ``average``),
``client`` (-1 for domain and average rows), ``accuracy``, ``num_train``, ``num_test``.
Every probe is seeded by (scenario seed, kind, domain or client).
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from fedclock.algorithms.base import Algorithm, ServerState, Tensors
from fedclock.algorithms.linear_eval import linear_probe
from fedclock.scenarios.domains import ALL_DOMAINS
from fedclock.scenarios.federation import Federation
from fedclock.scenarios.schema import LinearEvalConfig
from fedclock.scheduling.rng import Stream, torch_rng

_KEY = 0x4C494E  # keys the probes' generators apart from the server's initialization
_GENERALIZATION, _PERSONALIZATION = 0, 1

SCHEMA = pa.schema([("kind", pa.string()), ("domain", pa.string()), ("client", pa.int64()),
                    ("accuracy", pa.float64()), ("num_train", pa.int64()), ("num_test", pa.int64())])


def supports_linear_eval(algorithm: Algorithm) -> bool:
    """True for algorithms running a self-supervised objective (they expose
    ``global_representation`` and ``personal_probe``)."""
    return bool(getattr(algorithm, "ssl", False)) and hasattr(algorithm, "personal_probe")


def _domains(fed: Federation) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    if fed.client_domain is None or fed.train_domain is None or fed.test_domain is None:
        return (["all"], np.zeros(fed.num_clients, dtype=np.int64), np.zeros(len(fed.y), dtype=np.int64),
                np.zeros(len(fed.y_test), dtype=np.int64))
    return list(fed.domain_names), fed.client_domain, fed.train_domain, fed.test_domain


def linear_evaluation(algorithm: Any, state: ServerState, client_states: dict[int, Tensors | None],
                      federation: Federation, cfg: LinearEvalConfig, seed: int,
                      device: torch.device | str = "cpu") -> list[dict[str, Any]]:
    """Generalization and personalization rows (see the module docstring)."""
    names, client_domain, train_domain, test_domain = _domains(federation)
    probe = partial(linear_probe, epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size)
    algorithm.to(device)
    rows: list[dict[str, Any]] = []
    gen_acc = []
    for k, name in enumerate(names):
        tr = torch.from_numpy(np.flatnonzero(train_domain == k))
        te = torch.from_numpy(np.flatnonzero(test_domain == k))
        encoder = algorithm.global_representation(state)
        res = probe(encoder, federation.x[tr].to(device), federation.y[tr].to(device),
                           federation.x_test[te].to(device), federation.y_test[te].to(device),
                           federation.num_classes, None, torch_rng(seed, Stream.INIT, _KEY, _GENERALIZATION, k))
        gen_acc.append(res.accuracy)
        rows.append({"kind": "generalization", "domain": name, "client": -1, "accuracy": res.accuracy,
                     "num_train": len(tr), "num_test": res.count})
    rows.append({"kind": "generalization", "domain": "average", "client": -1, "accuracy": float(np.mean(gen_acc)),
                 "num_train": int(sum(r["num_train"] for r in rows)),
                 "num_test": int(sum(r["num_test"] for r in rows))})
    per_domain: dict[int, list[float]] = {k: [] for k in range(len(names))}
    client_rows: list[dict[str, Any]] = []
    personal = [c for c in range(federation.num_clients) if int(client_domain[c]) != ALL_DOMAINS]
    if not personal:
        return rows
    for i, c in enumerate(personal):
        data = federation.client_data(c, device)
        k = int(client_domain[c])
        te = torch.from_numpy(np.flatnonzero(test_domain == k))
        payload = algorithm.payload_for(state, c)
        if getattr(algorithm, "probe_uses_donor", False):  # FedStyle's swapped-style control: the next client's
            donor = client_states.get(personal[(i + 1) % len(personal)])
            frozen, adapter = algorithm.personal_probe(payload, client_states.get(c), donor)
        else:
            frozen, adapter = algorithm.personal_probe(payload, client_states.get(c))
        res = probe(frozen, data.x_train, data.y_train, federation.x_test[te].to(device),
                    federation.y_test[te].to(device), federation.num_classes,
                    adapter, torch_rng(seed, Stream.INIT, _KEY, _PERSONALIZATION, c))
        if res.count:
            per_domain[k].append(res.accuracy)
        client_rows.append({"kind": "personalization", "domain": names[k], "client": c, "accuracy": res.accuracy,
                            "num_train": data.num_train, "num_test": res.count})
    dom_acc = []
    for k, name in enumerate(names):
        acc = float(np.mean(per_domain[k])) if per_domain[k] else float("nan")
        dom_acc.append(acc)
        mine = [r for r in client_rows if r["domain"] == name]
        rows.append({"kind": "personalization", "domain": name, "client": -1, "accuracy": acc,
                     "num_train": int(sum(r["num_train"] for r in mine)),
                     "num_test": int(sum(r["num_test"] for r in mine))})
    rows.append({"kind": "personalization", "domain": "average", "client": -1,
                 "accuracy": float(np.nanmean(dom_acc)) if not np.all(np.isnan(dom_acc)) else float("nan"),
                 "num_train": int(sum(r["num_train"] for r in client_rows)),
                 "num_test": int(sum(r["num_test"] for r in client_rows))})
    return rows + client_rows


def write_linear_eval(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    """Write the rows to ``out_dir/linear_eval.parquet``; return the path."""
    path = out_dir / "linear_eval.parquet"
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, path)
    return path


def averages(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(generalization, personalization) averages from the rows."""
    pick = {r["kind"]: r["accuracy"] for r in rows if r["domain"] == "average"}
    return pick.get("generalization", float("nan")), pick.get("personalization", float("nan"))
