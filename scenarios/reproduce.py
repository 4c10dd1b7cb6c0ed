"""``fedclock reproduce FAMILY``: run a paper's claims on several paired seeds and write its report.

    fedclock reproduce FAMILY [--seeds N] [--jobs N] [--out DIR] [--report DIR] [--set KEY=VALUE ...]
                              [--allow-dirty]

FAMILY is a shipped claim set (``scenarios/reproductions/FAMILY.yaml``) or a claim file's
path; the format is in :mod:`fedclock.scenarios.claims`. For every claim the command runs each
(scenario file, run, seed) it needs once, seeds ``0 .. N-1`` (default: the set's ``seeds:``, or a
claim's own ``seeds:`` for that claim's runs),
into ``--out`` (default ``results/reproduce/FAMILY``), laid out as
``OUT/SETTING/RUN/seed_S`` where SETTING is the scenario file's name, plus a short hash of the
overrides when there are any. A run directory whose ``run.json`` says finished (written when
a run ends, after its linear evaluation) and whose ``scenario.resolved.yaml`` has the same
fingerprint as the job
(:func:`fedclock.scenarios.checkpoints.fingerprint`) is reused; any other is run again from
scratch. ``--jobs N`` runs up to N jobs side by side in separate processes. ``--set KEY=VALUE``
(repeatable, as ``fedclock run --set``) overrides a field of every scenario on top of the claim
set's overrides, e.g. ``--set runtime.device=cuda`` or a smaller setting; the report's command
line and settings show it.

Pairing: the runs of one file with the same seed share the partition and the clients' test
splits (seeded by the scenario seed only, :mod:`fedclock.scenarios.data.federation`) and the
initial global model (the server's INIT stream, :mod:`fedclock.scheduling.rng`), so A and B
of one seed differ only in what the claim names. A claim whose A and B differ in what
defines a seed's data (:data:`DATA_FIELDS`) is refused unless it says ``pairing: unpaired``
(:func:`plan`).

Provenance: the command reads the commit and whether the work tree is clean
(:mod:`fedclock.scenarios.provenance`; the reports and PNGs it writes into the report folder
are left out of that check). A tree with changes is refused unless ``--allow-dirty``; the
report's header then gives the hash of the changes. Reused runs made at another commit (their
``run.json``) are listed, with whether ``algorithms/`` differs between the two commits.

The report, ``REPORT/FAMILY.md`` (default ``docs/reproductions``), says it is generated, by
which command and from which source, how many rows it tests and how many false "holds" chance
alone would give; it has per claim the paper's number, the scoring (:func:`fedclock.scenarios.claims.scoring`),
ours as mean ± std (to-target metrics: over the seeds that reached the target, and on how many
they did), the pairing, the difference with its 95 % t confidence interval (paired, or
Welch's), the detectable difference at 80 % power, the verdict, the size against the paper's
effect and the Holm-adjusted p-value (:mod:`fedclock.scenarios.claim_stats`); then, for the
scenario files with a ``paper_setting``, a table of the paper's setting against ours read
from the resolved runs (:func:`setting_tables`). A claim with ``plot: true`` gets a PNG of both
runs' accuracy curves (mean ± std over seeds) beside the report.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
import numpy as np
import pandas as pd
import yaml

from fedclock.scenarios.api import execute, load, resolve_path
from fedclock.scenarios.checkpoints import fingerprint
from fedclock.scenarios import provenance
from fedclock.scenarios.claim_stats import (ALPHA, CANNOT_TELL, CENSORED, CONFIDENCE, DOES_NOT_HOLD, HOLDS,
                                            IDENTICAL, POWER, UNPAIRED, WIDE_FACTOR, Assessment, Paired, assess,
                                            expected_false_holds, holm, size_words)
from fedclock.scenarios.claims import (ACCURACY_COLUMN, SERVER_COLUMN, Claim, ClaimError, ClaimSet, load_claim_set,
                                       metric_kind, scoring)
from fedclock.scenarios.loader import ScenarioError, Suite, validate_scenario
from fedclock.scenarios.results import resolved_dict
from fedclock.scenarios.rundirs import SEED_DIR_PREFIX
from fedclock.scenarios.runstatus import FINISHED, read_status
from fedclock.scenarios.schema import Scenario

DONE_FILE = "clients.parquet"
"""One of the tables every run writes (at its start); a finished run also has ``run.json``
with status ``finished`` (:mod:`fedclock.scenarios.runstatus`), written after its last table
(the linear evaluation included)."""


@dataclass(frozen=True)
class Job:
    """One (scenario file, run, seed) to run into ``out_dir``."""

    scenario: Scenario
    out_dir: Path


@dataclass
class Setting:
    """One scenario file under one set of overrides, loaded for the requested seeds."""

    key: str
    path: Path
    overrides: dict[str, Any]
    suite: Suite
    names: set[str] = field(default_factory=set)
    """The runs some claim needs."""
    seeds_of: dict[str, int] = field(default_factory=dict)
    """Seeds each needed run gets (the most any of its claims asks for)."""

    def run_dir(self, out: Path, name: str, seed: int) -> Path:
        return out / self.key / name / f"{SEED_DIR_PREFIX}{seed}"

    def scenario(self, name: str, seed: int) -> Scenario:
        return next(s for s in self.suite.runs if s.name == name and s.seed == seed)


@dataclass(frozen=True)
class Outcome:
    """A claim's measurements and verdict."""

    claim: Claim
    setting: Setting
    a: list[float]
    """A's value per seed (+inf: never reached the target)."""
    b: list[float] | None
    row: Assessment
    margin: float
    """The margin the verdict used (:meth:`fedclock.scenarios.claims.Claim.margin_for`)."""
    reached: tuple[int, int] | None = None
    """Seeds on which A and B reached the target (to-target metrics; B: every seed for a
    reference number)."""
    holm: float | None = None
    """The row's Holm-adjusted p-value over the report's tested rows."""

    @property
    def verdict(self) -> str:
        """The verdict, or :data:`fedclock.scenarios.claim_stats.IDENTICAL`."""
        return self.row.verdict

    @property
    def stats(self) -> Paired | None:
        """The interval of A - B (None for identical runs and censored rows)."""
        return self.row.stats


DATA_FIELDS = ("dataset", "population.num_clients", "seed")
"""What defines the data a seed sees: runs differing in any of these pair nothing."""


def claim_seeds(claim_set: ClaimSet, seeds: int | None = None) -> dict[str, int]:
    """Seeds per claim id: ``seeds`` (``--seeds``) for every claim when given, else the claim's
    own ``seeds:`` or the set's."""
    return {c.id: seeds if seeds is not None else (c.seeds or claim_set.seeds) for c in claim_set.claims}


def plan(claim_set: ClaimSet, claim_file: Path, seeds: int, extra: dict[str, Any] | None = None,
         per_claim: dict[str, int] | None = None) -> dict[str, Setting]:
    """The settings (scenario file x overrides) each claim runs in, by claim id; ``extra``
    (``--set``) goes over every claim's overrides; ``per_claim`` (:func:`claim_seeds`): each
    claim's seed count, default ``seeds`` for all; a setting is loaded for the most seeds any of
    its claims needs, and each run gets those of the claims that name it (``Setting.seeds_of``)."""
    wanted = {c.id: (per_claim or {}).get(c.id, seeds) for c in claim_set.claims}
    keyed: dict[str, tuple[str, Path, dict[str, Any]]] = {}
    most: dict[str, int] = {}
    for claim in claim_set.claims:
        overrides = {**claim_set.overrides, **claim.overrides, **(extra or {})}
        path = _scenario_path(claim.scenario, claim_file)
        key = path.stem + (f"-{_short_hash(overrides)}" if overrides else "")
        keyed[claim.id] = (key, path, overrides)
        most[key] = max(most.get(key, 0), wanted[claim.id])
    by_key: dict[str, Setting] = {}
    out: dict[str, Setting] = {}
    for claim in claim_set.claims:
        key, path, overrides = keyed[claim.id]
        if key not in by_key:
            suite = load(path, {**overrides, "seeds": list(range(most[key]))})
            by_key[key] = Setting(key, path, overrides, suite)
        setting = by_key[key]
        names = list(dict.fromkeys(s.name for s in setting.suite.runs))
        for run in (claim.a, claim.b):
            if run is not None and run not in names:
                raise ClaimError(f"{claim_file}: claims.[{claim.id}]: run {run!r} is not in {path} "
                                 f"(its runs: {', '.join(names)})")
            if run is not None:
                setting.names.add(run)
                setting.seeds_of[run] = max(setting.seeds_of.get(run, 0), wanted[claim.id])
        out[claim.id] = setting
        if claim.b is not None and claim.b != claim.a and claim.pairing == "paired":
            differs = _data_differences(setting, claim.a, claim.b)
            if differs:
                raise ClaimError(f"{claim_file}: claims.[{claim.id}]: runs {claim.a!r} and {claim.b!r} see different "
                                 f"data ({', '.join(differs)}), so a seed pairs nothing; set pairing: unpaired "
                                 "(Welch's interval)")
    return out


def _data_differences(setting: Setting, a: str, b: str) -> list[str]:
    """The :data:`DATA_FIELDS` (down to the dataset section's first level) in which runs ``a``
    and ``b`` of ``setting`` differ, on every seed's scenario."""
    out: dict[str, None] = {}
    for seed in sorted({s.seed for s in setting.suite.runs}):
        x, y = resolved_dict(setting.scenario(a, seed)), resolved_dict(setting.scenario(b, seed))
        for name in DATA_FIELDS:
            u, v = _lookup(x, name), _lookup(y, name)
            if isinstance(u, dict) and isinstance(v, dict):
                for key in sorted(set(u) | set(v)):
                    if u.get(key) != v.get(key):
                        out[f"{name}.{key}"] = None
            elif u != v:
                out[name] = None
    return list(out)


_MISSING = object()


def _lookup(data: Any, path: str) -> Any:
    """The value at dotted ``path`` in a nested mapping (``_MISSING`` when absent)."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return _MISSING
        data = data[key]
    return data


@dataclass(frozen=True)
class SettingRow:
    """One field of a settings table (:func:`setting_tables`)."""

    field: str
    paper: str
    ours: str
    differs: str
    """``same``, ``differs`` (every run), ``differs (k of n runs)`` or ``not stated``."""
    note: str


@dataclass(frozen=True)
class SettingTable:
    """The paper's setting against one setting's resolved runs (:func:`setting_tables`)."""

    scenario: str
    setting: Setting
    source: str
    rows: list[SettingRow]


def setting_tables(claim_set: ClaimSet, claim_file: Path, settings: dict[str, Setting]) -> list[SettingTable]:
    """For every setting whose claims' ``scenario:`` has a ``paper_setting`` entry, the paper's
    value of each field against ours, read from the resolved scenario of each run the claims
    use (or the field's ``runs``) at the field's ``ours`` path; a path that is not there is a
    one-line :class:`ClaimError` naming the field."""
    tables: list[SettingTable] = []
    seen: set[int] = set()
    for claim in claim_set.claims:
        entry = claim_set.paper_setting.get(claim.scenario)
        setting = settings[claim.id]
        if entry is None or id(setting) in seen:
            continue
        seen.add(id(setting))
        file_runs = list(dict.fromkeys(s.name for s in setting.suite.runs))
        used = [n for n in file_runs if n in setting.names]
        seed = setting.suite.runs[0].seed
        rows: list[SettingRow] = []
        for name, f in entry.fields.items():
            where = f"{claim_file}: paper_setting.[{claim.scenario}].fields.{name}"
            for run in f.runs or []:
                if run not in file_runs:
                    raise ClaimError(f"{where}.runs: run {run!r} is not in {setting.path} (its runs: "
                                     f"{', '.join(file_runs)})")
            values: dict[str, Any] = {}
            for run in f.runs or used:
                value = _lookup(resolved_dict(setting.scenario(run, seed)), f.ours)
                if value is _MISSING:
                    raise ClaimError(f"{where}.ours: {f.ours!r} is not in the resolved scenario of run {run!r} "
                                     "(a dotted path, e.g. algorithm.lr, population.num_clients)")
                values[run] = value
            ours = _per_run({run: _value_text(v) for run, v in values.items()})
            if f.paper is None:
                differs = "not stated"
            else:
                off = sum(not _same(f.paper, v) for v in values.values())
                differs = "same" if off == 0 else "differs" if off == len(values) else \
                    f"differs ({off} of {len(values)} runs)"
            paper = "not stated" if f.paper is None else _value_text(f.paper)
            rows.append(SettingRow(name, paper + (f" ({f.source})" if f.source else ""), f"{ours} (`{f.ours}`)",
                                   differs, f.note))
        tables.append(SettingTable(claim.scenario, setting, entry.source, rows))
    return tables


def _per_run(texts: dict[str, str]) -> str:
    """One value, or the values with their runs ("run: value"), runs of one value together and
    the most common value written last as "every other run"."""
    groups: dict[str, list[str]] = {}
    for run, text in texts.items():
        groups.setdefault(text, []).append(run)
    if len(groups) == 1:
        return next(iter(groups))
    ordered = sorted(groups.items(), key=lambda item: len(item[1]))
    parts = [f"{', '.join(runs)}: {text}" for text, runs in ordered[:-1]]
    common, runs = ordered[-1]
    parts.append(f"every other run: {common}" if len(runs) > 1 else f"{runs[0]}: {common}")
    return "; ".join(parts)


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return value if isinstance(value, str) else json.dumps(value)


def _same(paper: str | int | float | bool, ours: Any) -> bool:
    """Whether the paper's value and ours agree: booleans exactly, numbers to a relative 1e-9,
    text ignoring case and every character but letters, digits and '.' ("CIFAR-10" is
    "cifar10")."""
    if isinstance(paper, bool) or isinstance(ours, bool):
        return isinstance(paper, bool) and isinstance(ours, bool) and paper == ours
    if isinstance(paper, (int, float)):
        try:
            number = float(ours)
        except (TypeError, ValueError):
            return False
        return math.isclose(float(paper), number, rel_tol=1e-9, abs_tol=1e-12)
    def norm(text: str) -> str:
        return re.sub(r"[^a-z0-9.]", "", text.lower())
    return norm(paper) == norm(_value_text(ours))


def _scenario_path(name: str, claim_file: Path) -> Path:
    beside = claim_file.parent / name
    return beside if beside.is_file() else resolve_path(name)


def _short_hash(overrides: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()[:8]


def jobs_for(settings: Sequence[Setting], out: Path) -> list[Job]:
    """Every (setting, run, seed) job some claim needs, once each, in a fixed order."""
    jobs: dict[Path, Job] = {}
    for setting in settings:
        for scenario in setting.suite.runs:
            if scenario.name in setting.names and scenario.seed < setting.seeds_of.get(scenario.name, 0):
                d = setting.run_dir(out, scenario.name, scenario.seed)
                jobs.setdefault(d, Job(scenario, d))
    return list(jobs.values())


def finished(job: Job) -> bool:
    """Whether ``job.out_dir`` holds a finished run of exactly this scenario (``run.json``
    says finished: a run cut off mid-way is run again)."""
    resolved = job.out_dir / "scenario.resolved.yaml"
    if not (job.out_dir / DONE_FILE).is_file() or not resolved.is_file():
        return False
    status = read_status(job.out_dir)
    if status is None or status.status != FINISHED:
        return False
    try:
        earlier = yaml.safe_load(resolved.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return False
    return isinstance(earlier, dict) and same_scenario(earlier, resolved_dict(job.scenario), str(resolved))


def same_scenario(earlier: dict[str, Any], now: dict[str, Any], where: str) -> bool:
    """Whether a run's ``scenario.resolved.yaml`` (``earlier``) is the scenario ``now`` resolves
    to: equal fingerprints, or ``earlier`` read by today's schema equals ``now``. The second
    lets a run made before a field was added be reused when the scenario leaves that field at
    its default (the schema's rule: a new field's default keeps the behaviour it had before the
    field existed); a field the schema no longer has, or a default that changed, does not
    read back equal, and the run is made again."""
    if fingerprint(earlier) == fingerprint(now):
        return True
    try:
        reread = resolved_dict(validate_scenario(earlier, where))
    except ScenarioError:
        return False
    return fingerprint(reread) == fingerprint(now)


def _run_job(resolved: dict[str, Any], out_dir: str) -> None:
    """Run one job (in this process or a worker): its scenario, loaded from its resolved form."""
    execute(load(resolved), Path(out_dir))


def run_jobs(jobs: Sequence[Job], workers: int, on_done: Callable[[Job], None] | None = None) -> int:
    """Run the jobs that are not :func:`finished`, up to ``workers`` at once in separate processes
    (in this process when 1); returns how many ran."""
    todo = [j for j in jobs if not finished(j)]
    for job in todo:
        if job.out_dir.exists():
            shutil.rmtree(job.out_dir)  # an unfinished or different run of ours: start it over
    if workers <= 1:
        for job in todo:
            execute(Suite(name=job.scenario.name, description="", runs=(job.scenario,), source="reproduce"),
                    job.out_dir)
            if on_done is not None:
                on_done(job)
        return len(todo)
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = [(job, pool.submit(_run_job, resolved_dict(job.scenario), str(job.out_dir))) for job in todo]
        for job, fut in futures:
            fut.result()
            if on_done is not None:
                on_done(job)
    return len(todo)


# --------------------------------------------------------------------------- measuring


def measure(metrics: pd.DataFrame, claim: Claim, metric: str | None = None) -> tuple[float, bool]:
    """The claim's metric (or ``metric``) on one run's ``metrics.parquet`` rows, and whether the
    run reached the target (always True for metrics without one; a run that never reached it
    is censored: +inf). Rows without the accuracy are skipped."""
    metric = claim.metric if metric is None else metric
    kind = metric_kind(metric)
    if kind == "server":
        column = SERVER_COLUMN[metric]
        values = metrics[column].dropna() if column in metrics else metrics.iloc[0:0]
        if len(values) == 0:
            raise ClaimError(f"claim {claim.id}: the run has no {column} (an algorithm of the client-momentum family "
                             "records it: fedcm, mofedsam, fedmrur and its ablations)")
        return float(values.to_numpy(dtype=float).mean()), True
    column = ACCURACY_COLUMN[kind]
    rows = metrics.dropna(subset=[column]) if column in metrics else metrics.iloc[0:0]
    if rows.empty:
        hint = {"personal": " (evaluate it, e.g. evaluation.personalized)",
                "adapted": " (evaluate it: evaluation.adapted)"}.get(kind, "")
        raise ClaimError(f"claim {claim.id}: the run has no {column}{hint}")
    acc = rows[column].to_numpy(dtype=float)
    if metric.startswith("final_"):
        return float(acc[-1]), True
    if metric.startswith("auc_"):
        return float(acc.mean()), True
    assert claim.target is not None
    at = "version" if metric.startswith("rounds_to_target") else "virtual_time"
    hit = np.flatnonzero(acc >= claim.target)
    if hit.size == 0:
        return math.inf, False
    return float(rows[at].iloc[int(hit[0])]), True


def measure_linear(run_dir: Path, claim: Claim, metric: str | None = None) -> float:
    """A ``linear_*`` metric (the claim's, or ``metric``): the ``average`` row of that kind in the
    run's ``linear_eval.parquet``."""
    path = run_dir / "linear_eval.parquet"
    if not path.is_file():
        raise ClaimError(f"claim {claim.id}: the run has no linear_eval.parquet (set evaluation.linear)")
    rows = pd.read_parquet(path)
    kind = (claim.metric if metric is None else metric).removeprefix("linear_")
    pick = rows[(rows["kind"] == kind) & (rows["domain"] == "average")]
    if pick.empty:
        raise ClaimError(f"claim {claim.id}: linear_eval.parquet has no {kind} average"
                         + (" (set evaluation.linear.style_controls)" if "_" in kind else ""))
    return float(pick["accuracy"].iloc[0])


def cka_by_version(rows: pd.DataFrame) -> pd.DataFrame:
    """One run's ``cka.parquet`` rows as CKA averaged over the clients, a row per measured
    version (ascending) and a column per layer."""
    return rows.groupby(["version", "layer_index"])["cka"].mean().unstack("layer_index").sort_index()


def cka_metric(rows: pd.DataFrame, metric: str) -> float:
    """A ``cka_*`` metric (:mod:`fedclock.scenarios.claims`) of one run's ``cka.parquet`` rows
    (client, layer_index, cka, version): CKA averaged over the clients per (version, layer), then
    ``cka_depth_drop``: first layer minus last layer at the first version; ``cka_rise``: mean over
    layers of the last version minus the first; ``cka_head_gap``: mean of every layer but the last
    minus the last layer, at the last version."""
    table = cka_by_version(rows)
    first, last = table.iloc[0], table.iloc[-1]
    if metric == "cka_depth_drop":
        return float(first.iloc[0] - first.iloc[-1])
    if metric == "cka_rise":
        return float((last - first).mean())
    if metric == "cka_head_gap":
        return float(last.iloc[:-1].mean() - last.iloc[-1])
    raise ValueError(f"not a CKA metric: {metric!r}")


def _cka_rows(run_dir: Path, claim: Claim) -> pd.DataFrame:
    path = run_dir / "cka.parquet"
    if not path.is_file():
        raise ClaimError(f"claim {claim.id}: the run has no cka.parquet (set analysis: cka)")
    rows = pd.read_parquet(path)
    needs = 2 if claim.metric == "cka_rise" else 1
    if rows["version"].nunique() < needs or rows["layer_index"].nunique() < 2:
        raise ClaimError(f"claim {claim.id}: {claim.metric} needs cka.parquet rows of at least {needs} version(s) "
                         "and 2 layers (set analysis.at_rounds)")
    return rows


def _metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "metrics.parquet")


RUN_COLUMNS = ("global_body_drift", "global_body_change")
"""Columns an algorithm reports about its own state (``metrics.parquet``) whose final values the
report lists per run (:func:`run_metric_rows`): FedReCo's global-body motion."""


def final_values(metrics: pd.DataFrame, columns: Sequence[str] = RUN_COLUMNS) -> dict[str, float]:
    """Each of ``columns`` at the last row where it is not NaN; a column that is absent or
    NaN throughout is left out."""
    out: dict[str, float] = {}
    for column in columns:
        if column in metrics:
            values = metrics[column].dropna()
            if not values.empty:
                out[column] = float(values.iloc[-1])
    return out


def run_metric_rows(settings: Sequence[Setting], out: Path, seeds: int,
                    columns: Sequence[str] = RUN_COLUMNS) -> list[str]:
    """Markdown table rows, one per (setting, run) whose runs report any of ``columns``: the
    final value of each as mean ± std (ddof 1) over the seeds, and the version it was read at."""
    rows = []
    for setting in settings:
        for name in sorted(setting.names):
            finals = []
            for s in range(seeds):
                path = setting.run_dir(out, name, s) / "metrics.parquet"
                frame = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
                finals.append((final_values(frame, columns), int(frame["version"].iloc[-1]) if len(frame) else -1))
            if not any(f for f, _ in finals):
                continue
            cells = []
            for column in columns:
                values = [f[column] for f, _ in finals if column in f]
                cells.append(f"{np.mean(values):.3g} ± {np.std(values, ddof=1) if len(values) > 1 else 0.0:.2g}"
                             if values else "–")
            version = sorted({v for _, v in finals})
            rows.append(f"| `{setting.key}` | `{name}` | {', '.join(map(str, version))} | " + " | ".join(cells) + " |")
    return rows


def evaluate(claim: Claim, setting: Setting, out: Path, seeds: int, set_margin: float = 0.01) -> Outcome:
    """Measure a claim on its finished runs and give its row (:func:`fedclock.scenarios.claim_stats.assess`)
    with the margin of :meth:`fedclock.scenarios.claims.Claim.margin_for` (``set_margin``: the set's)."""
    def values(name: str, metric: str) -> list[float]:
        if metric.startswith("linear_"):
            return [measure_linear(setting.run_dir(out, name, s), claim, metric) for s in range(seeds)]
        if metric.startswith("cka_"):
            return [cka_metric(_cka_rows(setting.run_dir(out, name, s), claim), metric) for s in range(seeds)]
        return [measure(_metrics(setting.run_dir(out, name, s)), claim, metric)[0] for s in range(seeds)]

    a = values(claim.a, claim.metric)
    b = values(claim.b, claim.metric_of_b) if claim.b is not None else None
    margin = claim.margin_for(set_margin)
    reference = claim.reference if claim.reference is not None else 0.0
    row = assess(a, b if b is not None else reference, claim.direction, margin, claim.paper_effect,
                 unpaired=claim.pairing == "unpaired")
    reached = None
    if claim.target is not None:
        reached = (sum(math.isfinite(v) for v in a), sum(math.isfinite(v) for v in b) if b is not None else seeds)
    return Outcome(claim, setting, a, b, row, margin, reached)


# --------------------------------------------------------------------------- the report


def reproduce(family: str, seeds: int | None = None, jobs: int = 1, out: Path | None = None,
              report_dir: Path | None = None,
              on_done: Callable[[Job], None] | None = None,
              sets: Sequence[str] = (), allow_dirty: bool = False) -> tuple[Path, list[Outcome]]:
    """Run ``family``'s claims (module docstring) and write its report; returns the report's path
    and the outcomes. ``sets``: ``--set`` overrides, ``"key=value"`` each; ``allow_dirty``: run
    from a work tree with uncommitted changes (the report's header then says so)."""
    claim_set, claim_file = load_claim_set(family)
    n = claim_set.seeds if seeds is None else seeds
    if n < 2:
        raise ClaimError(f"--seeds: paired statistics need at least 2 seeds (got {n})")
    if jobs < 1:
        raise ClaimError(f"--jobs: must be at least 1 (got {jobs})")
    out = Path("results") / "reproduce" / claim_set.family if out is None else out
    report_dir = Path("docs") / "reproductions" if report_dir is None else report_dir
    extra: dict[str, Any] = {}
    for text in sets:
        if "=" not in text:
            raise ClaimError(f"--set {text}: expected key=value, e.g. --set runtime.device=cuda")
        key, _, value = text.partition("=")
        extra[key.strip()] = value  # a string value is read as --set reads it (scenarios.loader)
    per_claim = claim_seeds(claim_set, seeds)
    settings = plan(claim_set, claim_file, n, extra, per_claim)
    tables = setting_tables(claim_set, claim_file, settings)
    state = provenance.source_state(ignore=lambda p: provenance.is_generated_report(p, report_dir))
    if state.clean is False and not allow_dirty:
        raise ClaimError(f"reproduce: the work tree {state.root} has uncommitted changes ({len(state.changed)} "
                         f"file(s), e.g. {state.changed[0]}); commit them, or give --allow-dirty to record the "
                         "diff's hash in the report")
    all_jobs = jobs_for(list({id(s): s for s in settings.values()}.values()), out)
    run_jobs(all_jobs, jobs, on_done)
    outcomes = [evaluate(c, settings[c.id], out, per_claim[c.id], claim_set.margin) for c in claim_set.claims]
    adjusted = holm([o.row.p for o in outcomes])
    outcomes = [replace(o, holm=h) for o, h in zip(outcomes, adjusted)]
    report_dir.mkdir(parents=True, exist_ok=True)
    plots = {o.claim.id: plot_claim(o, out, per_claim[o.claim.id], report_dir / f"{claim_set.family}_{o.claim.id}.png")
             for o in outcomes if o.claim.plot}
    command = f"fedclock reproduce {family if Path(family).suffix != '.yaml' else claim_file.name}" + (
        f" --seeds {n}" if seeds is not None else "") + "".join(f" --set {t}" for t in sets) + (
        " --allow-dirty" if allow_dirty else "")
    path = report_dir / f"{claim_set.family}.md"
    header = provenance_lines(state, [job.out_dir for job in all_jobs])
    unique = list({id(s): s for s in settings.values()}.values())
    run_rows = run_metric_rows(unique, out, n)
    path.write_text(report_text(claim_set, outcomes, n, command, header, plots, tables, run_rows), encoding="utf-8")
    return path, outcomes


def provenance_lines(state: provenance.SourceState, run_dirs: Sequence[Path]) -> list[str]:
    """The report's provenance: the commit and whether the tree is clean (with the diff's hash
    and the untracked files when not), and the runs made at another commit (their ``run.json``)
    with the algorithm files that differ between that commit and this one (a reader can see
    whether the runs use them)."""
    if not state.is_git:
        lines = [f"Source: {state.commit} (not a git checkout: whether it has local changes is unknown)."]
    elif state.clean:
        lines = [f"Source: commit `{state.commit}`, work tree clean."]
    else:
        untracked = f"; untracked: {', '.join(state.untracked)}" if state.untracked else ""
        lines = [f"Source: commit `{state.commit}` **with uncommitted changes** (--allow-dirty): sha256 of "
                 f"`git diff HEAD` and the untracked names `{state.diff_hash}`{untracked}."]
    by_commit: dict[str, list[str]] = {}
    for run_dir in run_dirs:
        status = read_status(run_dir)
        made = status.commit if status is not None else ""
        if made == state.commit or (state.clean is False and made == f"{state.commit} +dirty"):
            continue  # made here (a dirty tree's changes are the header's)
        by_commit.setdefault(made, []).append(str(run_dir))
    for made, dirs in by_commit.items():
        if not made:
            lines.append(f"- {len(dirs)} reused run(s) record no commit (made by an older fedclock).")
            continue
        sha = made.removesuffix(" +dirty")
        changes = provenance.algorithm_changes(state.root, sha, state.commit) if state.root is not None else None
        if changes is None:
            words = "whether its algorithm files differ is unknown"
        elif changes:
            words = ("its algorithm files (`algorithms/`) differ from this commit's in "
                     + ", ".join(f"`{name}`" for name in changes))
        else:
            words = "same algorithm files (`algorithms/`) as this commit"
        dirty = " (from a work tree with changes)" if made.endswith(" +dirty") else ""
        lines.append(f"- {len(dirs)} reused run(s) made at `{sha[:10]}`{dirty}: {words}.")
    if len(lines) > 1:
        lines.insert(1, "Runs made at another commit:")
    return lines


def _pm(values: Sequence[float], scale: float, unit: str = "") -> str:
    x = np.asarray(values, dtype=float) * scale
    return f"{report_number(x.mean(), unit)} ± {report_number(x.std(ddof=1), unit)}"


def _ours(values: Sequence[float], c: Claim) -> str:
    """Mean ± std over the seeds; for a to-target metric over the seeds that reached the target,
    with "reached on k of n"."""
    if c.target is None:
        return _pm(values, c.scale, c.unit)
    hit = [v for v in values if math.isfinite(v)]
    reached = f"reached on {len(hit)} of {len(values)}"
    if not hit:
        return f"never ({reached})"
    if len(hit) == 1:
        return f"{_shown(hit[0], c)} ({reached})"
    return f"{_pm(hit, c.scale, c.unit)} ({reached})"


def report_number(value: float, unit: str, sign: str = "", decimals: int = 2) -> str:
    """One number of the report: ``decimals`` places, or 3 significant digits in virtual
    seconds, whose scale is the modelled device's (a digits MLP's round takes microseconds
    at GPU speed); ``sign`` ``"+"`` always shows it."""
    return f"{value:{sign}.3g}" if unit == "virtual s" else f"{value:{sign}.{decimals}f}"


def _shown(value: float, claim: Claim, sign: str = "", decimals: int = 2) -> str:
    if math.isinf(value):
        return "never"
    return report_number(value * claim.scale, claim.unit, sign, decimals)


def _setting_text(setting: Setting) -> str:
    s = setting.suite.runs[0]
    stop = ", ".join(f"{k} {v}" for k, v in s.stop.model_dump(exclude_none=True).items())
    parts = [f"`{_shown_path(setting.path)}`", f"{s.dataset.name}", f"{s.population.num_clients} clients",
             f"model {s.model.name}", f"{s.mode.type} mode", f"stop: {stop}"]
    if setting.overrides:
        parts.append("overrides " + ", ".join(f"`{k}={v if isinstance(v, str) else json.dumps(v)}`"
                                              for k, v in setting.overrides.items()))
    return "; ".join(parts)


def _shown_path(path: Path) -> str:
    parts = path.resolve().parts
    return "/".join(parts[parts.index("scenarios"):]) if "scenarios" in parts else path.name


MARGIN_RULE = ("Margin m: for a directional claim with the paper's effect e, m = |e| / 2 unless the claim gives "
               "its own (never more than |e|); for a directional claim without e, and for an equality claim, the "
               "claim's margin or else the claim set's.")
"""The margin rule every report prints (:meth:`fedclock.scenarios.claims.Claim.margin_for`)."""


def report_text(claim_set: ClaimSet, outcomes: Sequence[Outcome], seeds: int, command: str, header: Sequence[str],
                plots: dict[str, Path], tables: Sequence[SettingTable] = (), run_rows: Sequence[str] = ()) -> str:
    """The report's Markdown (see the module docstring); ``header``: the provenance lines
    (:func:`provenance_lines`), ``tables``: the settings tables (:func:`setting_tables`),
    ``run_rows``: the algorithms' own final run metrics (:func:`run_metric_rows`)."""
    tested = sum(o.row.p is not None for o in outcomes)
    lines = [f"# Reproduction report: {claim_set.title}", "",
             f"*Generated by `{command}` — do not edit by hand; rerun the command.*", "",
             *header, "", f"Paper: {claim_set.paper}", ""]
    if claim_set.notes:
        lines += [claim_set.notes.strip(), ""]
    lines += not_holding_lines(outcomes)
    lines += [
        f"**{len(outcomes)} rows, {tested} tested** (identical runs are not). Each test runs at one-sided level "
        f"{ALPHA}, so chance alone would give on average {tested} × {ALPHA} = "
        f"{expected_false_holds(tested):.2f} false *holds* among them; the *Holm* column is each row's p-value "
        f"adjusted for the {tested} tests (Holm's step-down; a row holds after adjustment when it is ≤ {ALPHA}).", "",
        f"Every number is over {seeds} seeds (0..{seeds - 1})"
        + ("" if all(len(o.a) == seeds for o in outcomes) else ", except in the rows whose claim asks for more "
           "(their *Seeds* line below; only their own runs get the extra seeds)")
        + ". *paired*: for one seed, A and B share the partition, "
        "the clients' test splits and the initial model; *unpaired (Welch)*: A and B see different data (partition, "
        "data set or client count), so the interval is Welch's. *ours*: mean ± std (ddof 1) over seeds (over the "
        "seeds that reached the target for to-target metrics, with on how many they did); *A − B*: the mean "
        f"difference with its {int(CONFIDENCE * 100)} % Student-t confidence interval; *detectable*: the difference "
        f"this test would detect with {int(POWER * 100)} % power at two-sided alpha {1 - CONFIDENCE:.2f}, "
        "(t(0.975, df) + t(0.80, df)) × SE (5.4 SE for 3 paired seeds; 2.8 SE for many seeds).", "",
        f"Verdict. {MARGIN_RULE} A directional claim *holds* when the interval excludes 0 on the claimed side and "
        "*does not hold* when it excludes 0 on the other side, or lies wholly inside ± m and excludes the paper's "
        "effect (inside ± m without a paper effect); an equality claim *holds* when the interval lies wholly inside "
        "± m and *does not hold* only when it lies wholly outside; otherwise *cannot tell at this power*. To-target "
        "metrics: a seed that never reaches the target is censored, never a value; with a censored seed, A reaching "
        "on every seed and B on none decides, else a paired sign rule (exact binomial, one-sided "
        f"{ALPHA}). Runs equal on every seed get no interval and no verdict. *size*: where the paper's effect lies "
        "against our interval, and ours / paper; \"a wide factor\" is a ratio of at least "
        f"{WIDE_FACTOR:g} or at most 1/{WIDE_FACTOR:g} with the paper's effect outside the interval, written "
        "\"Nx the paper's size\". Accuracies in % points, rounds in server versions, time in virtual seconds, "
        "CKA x 100, norm gains as ratios. The rule is `scenarios/claim_stats.py`.", "",
        "| claim | paper (source) | metric | scoring | A | B | ours A | ours B | pairing | A − B [95 % CI] | "
        "detectable | verdict | size (paper's effect) | Holm p |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        c = o.claim
        k = c.scale
        b_text = f"`{c.b}`" if c.b is not None else f"ref. {c.reference * k:g}" if c.reference is not None else ""
        lines.append("| " + " | ".join(cell(t) for t in [
            f"{c.id}{' (ablation)' if c.ablation else ''}", f"{c.paper} ({c.source})", _metric_text(c),
            _scoring_text(c), f"`{c.a}`", b_text, _ours(o.a, c), _ours(o.b, c) if o.b is not None else "–",
            _pairing(o), _difference(o), _shown(o.stats.detectable, c) if o.stats is not None else "–",
            f"*{IDENTICAL}*" if o.verdict == IDENTICAL else f"**{o.verdict}**", _size_text(o),
            f"{o.holm:.3g}" if o.holm is not None else "–"]) + " |")
    if tables:
        lines += ["", "## The paper's setting against ours", "",
                  "Generated from each run's resolved scenario at the field's path (`ours`); never typed by hand.", ""]
        for table in tables:
            lines += [f"### `{table.scenario}` (runs in `{table.setting.key}`)"
                      + (f", paper: {table.source}" if table.source else ""), "",
                      f"Setting: {_setting_text(table.setting)}", "",
                      "| field | paper (source) | ours | differs | note |", "|---|---|---|---|---|"]
            lines += [f"| {cell(r.field)} | {cell(r.paper)} | {cell(r.ours)} | "
                      f"{'**' + r.differs + '**' if r.differs.startswith('differs') else r.differs} | {cell(r.note)} |"
                      for r in table.rows]
            lines.append("")
    if run_rows:
        lines += ["", "## The algorithms' own run metrics (final values)", "",
                  f"Read from each run's `metrics.parquet` at its last evaluation, mean ± std over the {seeds} seeds. "
                  "global_body_drift: ||u_0 - u_0(init)|| / ||u_0(init)||, how far FedReCo's global body has moved "
                  "from its initialization; global_body_change: ||u_0^t - u_0^(t-1)|| / ||u_0^(t-1)||, its relative "
                  "change in the last server step (small: u_0 has settled).", "",
                  "| setting | run | version | " + " | ".join(RUN_COLUMNS) + " |",
                  "|---|---|---|" + "---|" * len(RUN_COLUMNS), *run_rows]
    lines += ["", "## Claims", ""]
    for o in outcomes:
        c = o.claim
        lines += [f"### {c.id}{' (ablation)' if c.ablation else ''}", "",
                  f"- Paper ({c.source}): {c.statement} — {c.paper}",
                  f"- Setting: {_setting_text(o.setting)}",
                  f"- Metric: {_metric_text(c)} ({c.unit}); scoring: {_scoring_text(c)}; claimed: A "
                  f"{_claimed(c, o.margin)}",
                  f"- A = `{c.a}` per seed: {', '.join(_shown(v, c) for v in o.a)}"]
        if o.b is not None:
            lines.append(f"- B = `{c.b}` per seed: {', '.join(_shown(v, c) for v in o.b)}")
        if o.reached is not None:
            lines.append(f"- Reached {c.target:g}: A on {o.reached[0]} of {len(o.a)} seeds, B on {o.reached[1]} of "
                         f"{len(o.a)}" + (" (B: the reference number)" if c.b is None else ""))
        if len(o.a) != seeds:
            lines.append(f"- Seeds: {len(o.a)} (0..{len(o.a) - 1}), this claim's own count")
        lines.append(f"- Pairing: {_pairing(o)}; margin ± {_shown(o.margin, c, '', 3)} ({c.margin_origin()})")
        if o.row.sign is not None:
            s = o.row.sign
            lines.append(f"- Sign rule: {s.wins} seed(s) on the claimed side, {s.losses} on the other, {s.ties} "
                         f"tie(s) dropped; exact one-sided p {s.p_claimed:.3g} (other side {s.p_other:.3g})")
        if o.stats is not None:
            lines.append(f"- A − B: {_shown(o.stats.mean, c, '+', 3)}, 95 % CI [{_shown(o.stats.low, c, '+', 3)}, "
                         f"{_shown(o.stats.high, c, '+', 3)}], SE {_shown(o.stats.se, c, '', 3)}, df "
                         f"{o.stats.df:.3g}; detectable at 80 % power: {_shown(o.stats.detectable, c, '', 3)}")
        if c.paper_effect is not None:
            ratio = o.row.size.ratio if o.row.size is not None else None
            lines.append(f"- Paper's effect: {_shown(c.paper_effect, c, '+', 3)}"
                         + (f"; ours / paper {ratio:.3g}" if ratio is not None else "")
                         + (f"; {o.row.size.words}" if o.row.size is not None else ""))
        p_text = f"; p {o.row.p:.3g}, Holm-adjusted {o.holm:.3g}" if o.row.p is not None and o.holm is not None else ""
        lines.append(f"- Verdict: **{o.verdict}**{p_text}")
        if c.id in plots:
            lines += ["", f"![{c.id}]({plots[c.id].name})"]
        lines.append("")
    return "\n".join(lines)


def cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` of its own (a norm ``||x||``) escaped."""
    return str(text).replace("|", "\\|")


NO_REASON = "*no reason written in the claim set (`why_not:`)*"
"""What the header says for a row that does not hold and whose claim gives no ``why_not``."""


def not_holding(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The rows whose verdict is not *holds* (does not hold, cannot tell, identical), in order."""
    return [o for o in outcomes if o.verdict != HOLDS]


def not_holding_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """The header's list of the rows that do not hold, each with its claim's ``why_not``
    sentence (:data:`NO_REASON` where the claim gives none), grouped by verdict."""
    rows = not_holding(outcomes)
    if not rows:
        return [f"**Every one of the {len(outcomes)} rows holds.**", ""]
    lines = [f"**Rows that do not hold: {len(rows)} of {len(outcomes)}**, and why:", ""]
    for verdict in (DOES_NOT_HOLD, CANNOT_TELL, IDENTICAL):
        group = [o for o in rows if o.verdict == verdict]
        if group:
            lines.append(f"- *{verdict}* ({len(group)}):")
            lines += [f"  - `{o.claim.id}`: {o.claim.why_not.strip() or NO_REASON}" for o in group]
    return lines + [""]


def _scoring_text(c: Claim) -> str:
    a, b = scoring(c.metric), scoring(c.metric_of_b)
    return a if a == b else f"A: {a}; B: {b}"


def _pairing(o: Outcome) -> str:
    if o.claim.b is None:
        return "single cell against the paper's number"
    if o.row.method == CENSORED:
        return "paired (sign rule: censored seeds)"
    return UNPAIRED if o.claim.pairing == "unpaired" else "paired"


def _difference(o: Outcome) -> str:
    c = o.claim
    if o.row.method == IDENTICAL:
        return "–"
    if o.stats is None:
        if o.row.sign is None:
            return "– (censored, unpaired)"
        s = o.row.sign
        return f"censored: {s.wins} won, {s.losses} lost, {s.ties} tied"
    return f"{_shown(o.stats.mean, c, '+')} [{_shown(o.stats.low, c, '+')}, {_shown(o.stats.high, c, '+')}]"


def _size_text(o: Outcome) -> str:
    c = o.claim
    if c.paper_effect is None:
        return "–"
    effect = _shown(c.paper_effect, c, "+")
    if o.row.size is None:
        return f"– ({effect})"
    return f"{size_words(o.row)} ({effect})"


def _metric_text(c: Claim) -> str:
    if c.b_metric is not None:
        return f"{c.metric} (A) vs {c.b_metric} (B)"
    return f"{c.metric} ≥ {c.target:g}" if c.target is not None else c.metric


def _claimed(c: Claim, margin: float) -> str:
    other = f"`{c.b}`" if c.b is not None else f"{(c.reference or 0.0) * c.scale:g}"
    word = {"greater": ">", "less": "<", "equal": "≈"}[c.direction]
    return f"{word} {other}" + (f" (within ± {margin * c.scale:g})" if c.direction == "equal" else "")


def _save_claim_plot(fig: Figure, ax: Axes, claim: Claim, path: Path) -> Path:
    """A claim's plot finished (its id and source as title, legend) and written to ``path``."""
    ax.set_title(f"{claim.id}: {claim.source}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_claim(o: Outcome, out: Path, seeds: int, path: Path) -> Path:
    """Accuracy against server version of A and B, mean ± std over seeds, written to ``path``
    (for a ``cka_*`` claim: :func:`plot_cka`)."""
    c = o.claim
    if c.metric.startswith("cka_"):
        return plot_cka(o, out, seeds, path)
    column = SERVER_COLUMN.get(c.metric) or ACCURACY_COLUMN.get(metric_kind(c.metric), "global_accuracy")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in [c.a] + ([c.b] if c.b is not None else []):
        frames = [_metrics(o.setting.run_dir(out, name, s)).dropna(subset=[column]) for s in range(seeds)]
        versions = sorted(set.intersection(*(set(f["version"]) for f in frames)))
        curves = np.array([f.drop_duplicates("version", keep="last").set_index("version").loc[versions, column]
                           for f in frames], dtype=float) * c.scale
        mean, std = curves.mean(axis=0), curves.std(axis=0, ddof=1)
        ax.plot(versions, mean, label=f"{name} (n={seeds})")
        ax.fill_between(versions, mean - std, mean + std, alpha=0.2)
    if c.reference is not None:
        ax.axhline(c.reference * c.scale, color="grey", linestyle="--", label="paper")
    ax.set_xlabel("server version")
    ax.set_ylabel({"personal_accuracy_mean": "mean personalized accuracy (%)",
                   "adapted_accuracy_mean": "mean adapted accuracy (%)",
                   "update_norm_gain": "update norm gain (mean norm / norm of mean)"}.get(
        column, "global accuracy (%)"))
    return _save_claim_plot(fig, ax, c, path)



def plot_cka(o: Outcome, out: Path, seeds: int, path: Path) -> Path:
    """CKA against layer (clients averaged), one line per run and measured version, mean ± std
    over seeds (FedReCo Fig. 2's panels), written to ``path``."""
    c = o.claim
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in [c.a] + ([c.b] if c.b is not None else []):
        tables = [cka_by_version(pd.read_parquet(o.setting.run_dir(out, name, s) / "cka.parquet"))
                  for s in range(seeds)]
        for version in tables[0].index:
            curves = np.array([t.loc[version].to_numpy(dtype=float) for t in tables])
            mean, std = curves.mean(axis=0), curves.std(axis=0, ddof=1)
            layers = np.arange(1, curves.shape[1] + 1)
            ax.plot(layers, mean, marker="o", label=f"{name}, after version {version} (n={seeds})")
            ax.fill_between(layers, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("layer (input to classifier)")
    ax.set_ylabel("CKA, local vs global model")
    ax.set_ylim(0, 1.05)
    return _save_claim_plot(fig, ax, c, path)
