"""The final linear evaluation of a self-supervised run, as the FedStyle paper defines it.

* **Generalization**, per style domain: the frozen global representation
  (``algorithm.global_representation(state)``, FedStyle: the global f_c) and a linear
  classifier trained on *all* of the domain's training pool (every client's share,
  train and test splits alike), tested on the domain's global test set.
* **Transfer** (cross-style; not in the paper, a harder probe that is not at ceiling): the
  classifier each domain's generalization probe trained, tested on the global test sets of
  the *other* domains (their mean accuracy; the domain's row is the style it trained on).
  It asks whether the global features of one object are the same whatever its style, which
  is what style infusion is meant to teach the content model (FedStyle, Sec. "Analysis of
  style-infused representation"). A single-domain federation has no transfer rows.
* **Personalization**, per client: the client's frozen representation and trainable
  adapter (``algorithm.personal_probe(payload, client_state)``; FedStyle: its local
  ``[f_c, f_s]`` frozen and its generator G trained with the classifier) and a linear
  classifier trained on the client's train split ("on local data only"), tested "on the
  corresponding testing data in each style dataset": the global test set of the client's
  domain, as generalization is (the client's own test split, if any, is not used); a
  domain's figure is the mean over its clients. FedStyle's ``probe_style: swapped`` control
  gets the state of the next client (id order, wrapping round) that has one as the donor of
  its style encoder. The single client of a Centralized
  federation (domain :data:`~fedclock.scenarios.data.domains.ALL_DOMAINS`) has no
  personalization rows.
* **Style controls** (``evaluation.linear.style_controls``; algorithms whose probe has a
  style, i.e. that list ``probe_style_controls``: FedStyle): the personalization probe again
  in the same run with each control, kinds ``personalization_swapped`` (the next
  client's style encoder), ``personalization_zero`` (zeros in place of the style) and
  ``personalization_content`` (the generalized content feature alone, the paper's ablation
  "Stylized content feature"), everything else (the client's models, its G, the classifier's initialization and batch
  order) the same as the own-style probe, so own and control are paired client by client.

Every probe's features are computed once per (encoder, image set) and the classifiers are
trained on those cached features (:func:`~fedclock.algorithms.linear_eval.train_probe`); a
domain's generalization classifier serves its transfer rows too.

Each kind is averaged over domains. A federation without domains counts as one domain
``all``. Rows go to ``linear_eval.parquet`` in the run directory with columns ``kind``
(generalization | transfer | personalization | personalization_swapped |
personalization_zero | personalization_content), ``domain`` (a domain's name or ``average``),
``client`` (-1 for domain and average rows), ``accuracy``, ``num_train``, ``num_test``.
Every probe is seeded by (scenario seed, kind, domain or client); a control probe shares its
client's own-style seed. With ``evaluation.linear.probe_seeds`` n > 1 each probe trains n
classifiers on the same cached features (and n fresh copies of its adapter), the first with
the probe's seed and the others with that seed and the repeat's index, and its accuracy is
their mean: the probe's own noise (initialization and batch order) shrinks, paired control by
control as before.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from fedclock.algorithms.base import Algorithm, EvalResult, ServerState, Tensors, evaluate_module
from fedclock.algorithms.linear_eval import train_probe
from fedclock.algorithms.ssl import features_of
from fedclock.scenarios.data.domains import ALL_DOMAINS
from fedclock.scenarios.data.federation import Federation
from fedclock.scenarios.runfiles import LINEAR_EVAL_FILE
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


FEATURE_BATCH = 1024
"""Images per forward pass when features are extracted (as :func:`~fedclock.algorithms.linear_eval.linear_probe`)."""


def _probe_rng(seed: int, kind: int, index: int, repeat: int) -> torch.Generator:
    """The generator of a probe's ``repeat``-th classifier; the first is the probe's own
    (seed, kind, domain or client) generator, so ``probe_seeds: 1`` gives the single probe."""
    keys = (_KEY, kind, index) if repeat == 0 else (_KEY, kind, index, repeat)
    return torch_rng(seed, Stream.INIT, *keys)


def _fit(frozen: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor, num_classes: int,
         adapter: torch.nn.Module | None, seeds: tuple[int, int, int], cfg: LinearEvalConfig) -> list[torch.nn.Module]:
    """``cfg.probe_seeds`` probes trained on ``frozen``'s features of (x, y), computed once;
    each starts from its own copy of ``adapter`` and its own generator (:func:`_probe_rng` of
    ``seeds`` = (scenario seed, kind, domain or client) and the repeat)."""
    feats = features_of(frozen, x, FEATURE_BATCH).detach()
    probes = []
    with torch.enable_grad():
        for r in range(cfg.probe_seeds):
            own = copy.deepcopy(adapter) if adapter is not None and r < cfg.probe_seeds - 1 else adapter
            probes.append(train_probe(feats, y, num_classes, own, _probe_rng(*seeds, r), epochs=cfg.epochs,
                                      lr=cfg.lr, batch_size=cfg.batch_size))
    return probes


def _accuracy(probes: list[torch.nn.Module], feats: torch.Tensor, y: torch.Tensor) -> EvalResult:
    """The probes' mean accuracy on (feats, y), as an :class:`EvalResult` over ``len(y)`` samples."""
    results = [evaluate_module(p, feats, y, FEATURE_BATCH) for p in probes]
    n = len(results)
    return EvalResult(sum(r.correct for r in results) / n, results[0].count, sum(r.loss_sum for r in results) / n)


def linear_evaluation(algorithm: Any, state: ServerState, client_states: dict[int, Tensors | None],
                      federation: Federation, cfg: LinearEvalConfig, seed: int,
                      device: torch.device | str = "cpu") -> list[dict[str, Any]]:
    """Generalization, transfer and personalization rows (see the module docstring)."""
    names, client_domain, train_domain, test_domain = _domains(federation)
    algorithm.to(device)
    tests = [torch.from_numpy(np.flatnonzero(test_domain == k)) for k in range(len(names))]
    test_x = [federation.x_test[te].to(device) for te in tests]
    test_y = [federation.y_test[te].to(device) for te in tests]
    encoder = algorithm.global_representation(state)
    test_feats = [features_of(encoder, x, FEATURE_BATCH).detach() for x in test_x]
    rows: list[dict[str, Any]] = []
    transfer: list[dict[str, Any]] = []
    for k, name in enumerate(names):
        tr = torch.from_numpy(np.flatnonzero(train_domain == k))
        res = EvalResult(0.0, 0, 0.0)
        others = [j for j in range(len(names)) if j != k and len(test_y[j])]
        if len(tr) and len(test_y[k]):
            probes = _fit(encoder, federation.x[tr].to(device), federation.y[tr].to(device), federation.num_classes,
                          None, (seed, _GENERALIZATION, k), cfg)
            res = _accuracy(probes, test_feats[k], test_y[k])
            if others:
                accs = [_accuracy(probes, test_feats[j], test_y[j]).accuracy for j in others]
                transfer.append({"kind": "transfer", "domain": name, "client": -1, "accuracy": float(np.mean(accs)),
                                 "num_train": len(tr), "num_test": int(sum(len(test_y[j]) for j in others))})
        rows.append({"kind": "generalization", "domain": name, "client": -1, "accuracy": res.accuracy,
                     "num_train": len(tr), "num_test": res.count})
    rows.append(_average("generalization", rows))
    if transfer:
        rows += transfer + [_average("transfer", transfer)]
    personal = [c for c in range(federation.num_clients) if int(client_domain[c]) != ALL_DOMAINS]
    if not personal:
        return rows
    controls: tuple[str, ...] = tuple(getattr(algorithm, "probe_style_controls", ())) if cfg.style_controls else ()
    client_rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ("own", *controls)}
    for c in personal:
        data = federation.client_data(c, device)
        k = int(client_domain[c])
        payload = algorithm.payload_for(state, c)
        donor = _donor(c, personal, client_states)
        for style in client_rows:
            if style != "own":
                frozen, adapter = algorithm.personal_probe(payload, client_states.get(c), donor, style=style)
            elif getattr(algorithm, "probe_uses_donor", False):  # FedStyle's swapped-style control
                frozen, adapter = algorithm.personal_probe(payload, client_states.get(c), donor)
            else:
                frozen, adapter = algorithm.personal_probe(payload, client_states.get(c))
            res = EvalResult(0.0, 0, 0.0)
            if data.num_train and len(test_y[k]):
                probes = _fit(frozen, data.x_train, data.y_train, federation.num_classes, adapter,
                              (seed, _PERSONALIZATION, c), cfg)
                res = _accuracy(probes, features_of(frozen, test_x[k], FEATURE_BATCH).detach(), test_y[k])
            kind = "personalization" if style == "own" else f"personalization_{style}"
            client_rows[style].append({"kind": kind, "domain": names[k], "client": c, "accuracy": res.accuracy,
                                       "num_train": data.num_train, "num_test": res.count})
    tail: list[dict[str, Any]] = []
    for per_client in client_rows.values():
        rows += _personal_summary(per_client, names)
        tail += per_client
    return rows + tail


def _donor(client: int, personal: list[int], client_states: dict[int, Tensors | None]) -> Tensors | None:
    """The state of the next client after ``client`` (id order, wrapping round) that has one."""
    trained = [c for c in personal if client_states.get(c) is not None]
    if not trained:
        return None
    later = [c for c in trained if c > client]
    return client_states[later[0] if later else trained[0]]


def _average(kind: str, domain_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``average`` row of ``kind`` over its domain rows (mean accuracy, summed counts)."""
    return {"kind": kind, "domain": "average", "client": -1,
            "accuracy": float(np.mean([r["accuracy"] for r in domain_rows])),
            "num_train": int(sum(r["num_train"] for r in domain_rows)),
            "num_test": int(sum(r["num_test"] for r in domain_rows))}


def _personal_summary(client_rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Per-domain rows (mean over the domain's clients with a test set) and the average over
    domains (NaN domains skipped) of one personalization kind."""
    kind = client_rows[0]["kind"]
    rows, dom_acc = [], []
    for name in names:
        mine = [r for r in client_rows if r["domain"] == name]
        scored = [r["accuracy"] for r in mine if r["num_test"]]
        acc = float(np.mean(scored)) if scored else float("nan")
        dom_acc.append(acc)
        rows.append({"kind": kind, "domain": name, "client": -1, "accuracy": acc,
                     "num_train": int(sum(r["num_train"] for r in mine)),
                     "num_test": int(sum(r["num_test"] for r in mine))})
    rows.append({"kind": kind, "domain": "average", "client": -1,
                 "accuracy": float(np.nanmean(dom_acc)) if not np.all(np.isnan(dom_acc)) else float("nan"),
                 "num_train": int(sum(r["num_train"] for r in client_rows)),
                 "num_test": int(sum(r["num_test"] for r in client_rows))})
    return rows


def write_linear_eval(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    """Write the rows to ``out_dir/linear_eval.parquet``; return the path."""
    path = out_dir / LINEAR_EVAL_FILE
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, path)
    return path


def averages(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(generalization, personalization) averages from the rows."""
    pick = {r["kind"]: r["accuracy"] for r in rows if r["domain"] == "average"}
    return pick.get("generalization", float("nan")), pick.get("personalization", float("nan"))
