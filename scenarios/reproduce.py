"""``fedclock reproduce FAMILY``: run a paper's claims on several paired seeds and write its report.

    fedclock reproduce FAMILY [--seeds N] [--jobs N] [--out DIR] [--report DIR] [--set KEY=VALUE ...]

FAMILY is a shipped claim set (``scenarios/reproductions/FAMILY.yaml``) or a claim file's
path; the format is in :mod:`fedclock.scenarios.claims`. For every claim the command runs each
(scenario file, run, seed) it needs once, seeds ``0 .. N-1`` (default: the set's ``seeds:``),
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
splits (seeded by the scenario seed only, :mod:`fedclock.scenarios.federation`) and the
initial global model (the server's INIT stream, :mod:`fedclock.scheduling.rng`), so A and B
of one seed differ only in what the claim names.

The report, ``REPORT/FAMILY.md`` (default ``docs/reproductions``), says it is generated, by
which command and at which commit, and has per claim the paper's number, ours as mean ± std,
the paired difference with its 95 % t confidence interval, the detectable difference at 80 %
power and the verdict (:mod:`fedclock.scenarios.claim_stats`); a claim with ``plot: true``
gets a PNG of both runs' accuracy curves (mean ± std over seeds) beside the report.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
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
from fedclock.scenarios.claim_stats import CONFIDENCE, POWER, Paired, paired, verdict
from fedclock.scenarios.claims import Claim, ClaimError, ClaimSet, load_claim_set
from fedclock.scenarios.loader import Suite
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
    b: list[float] | None
    stats: Paired
    verdict: str
    unreached: tuple[int, int] = (0, 0)
    """Seeds of A and of B that never reached the target (to-target metrics)."""


def plan(claim_set: ClaimSet, claim_file: Path, seeds: int, extra: dict[str, Any] | None = None
         ) -> dict[str, Setting]:
    """The settings (scenario file x overrides) each claim runs in, by claim id; ``extra``
    (``--set``) goes over every claim's overrides."""
    by_key: dict[str, Setting] = {}
    out: dict[str, Setting] = {}
    for claim in claim_set.claims:
        overrides = {**claim_set.overrides, **claim.overrides, **(extra or {})}
        path = _scenario_path(claim.scenario, claim_file)
        key = path.stem + (f"-{_short_hash(overrides)}" if overrides else "")
        if key not in by_key:
            suite = load(path, {**overrides, "seeds": list(range(seeds))})
            by_key[key] = Setting(key, path, overrides, suite)
        setting = by_key[key]
        names = list(dict.fromkeys(s.name for s in setting.suite.runs))
        for run in (claim.a, claim.b):
            if run is not None and run not in names:
                raise ClaimError(f"{claim_file}: claims.[{claim.id}]: run {run!r} is not in {path} "
                                 f"(its runs: {', '.join(names)})")
            if run is not None:
                setting.names.add(run)
        out[claim.id] = setting
    return out


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
            if scenario.name in setting.names:
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
    return isinstance(earlier, dict) and fingerprint(earlier) == fingerprint(resolved_dict(job.scenario))


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
    run reached the target (always True for metrics without one). Rows without the accuracy are
    skipped."""
    metric = claim.metric if metric is None else metric
    column = "personal_accuracy_mean" if metric.endswith("_personal") else "global_accuracy"
    rows = metrics.dropna(subset=[column]) if column in metrics else metrics.iloc[0:0]
    if rows.empty:
        raise ClaimError(f"claim {claim.id}: the run has no {column} (evaluate it, e.g. evaluation.personalized)")
    acc = rows[column].to_numpy(dtype=float)
    if metric.startswith("final_"):
        return float(acc[-1]), True
    if metric.startswith("auc_"):
        return float(acc.mean()), True
    assert claim.target is not None
    at = "version" if metric.startswith("rounds_to_target") else "virtual_time"
    hit = np.flatnonzero(acc >= claim.target)
    if hit.size == 0:
        return float(rows[at].iloc[-1]), False
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


def evaluate(claim: Claim, setting: Setting, out: Path, seeds: int) -> Outcome:
    """Measure a claim on its finished runs and give its verdict."""
    def values(name: str, metric: str) -> tuple[list[float], int]:
        if metric.startswith("linear_"):
            return [measure_linear(setting.run_dir(out, name, s), claim, metric) for s in range(seeds)], 0
        if metric.startswith("cka_"):
            return [cka_metric(_cka_rows(setting.run_dir(out, name, s), claim), metric)
                    for s in range(seeds)], 0
        got = [measure(_metrics(setting.run_dir(out, name, s)), claim, metric) for s in range(seeds)]
        return [v for v, _ in got], sum(not ok for _, ok in got)

    a, missed_a = values(claim.a, claim.metric)
    b, missed_b = values(claim.b, claim.metric_of_b) if claim.b is not None else (None, 0)
    reference = claim.reference if claim.reference is not None else 0.0
    stats = paired(a, b if b is not None else reference)
    return Outcome(claim, setting, a, b, stats, verdict(stats, claim.direction, claim.margin), (missed_a, missed_b))


# --------------------------------------------------------------------------- the report


def reproduce(family: str, seeds: int | None = None, jobs: int = 1, out: Path | None = None,
              report_dir: Path | None = None,
              on_done: Callable[[Job], None] | None = None,
              sets: Sequence[str] = ()) -> tuple[Path, list[Outcome]]:
    """Run ``family``'s claims (module docstring) and write its report; returns the report's path
    and the outcomes. ``sets``: ``--set`` overrides, ``"key=value"`` each."""
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
    settings = plan(claim_set, claim_file, n, extra)
    run_jobs(jobs_for(list({id(s): s for s in settings.values()}.values()), out), jobs, on_done)
    outcomes = [evaluate(c, settings[c.id], out, n) for c in claim_set.claims]
    report_dir.mkdir(parents=True, exist_ok=True)
    plots = {o.claim.id: plot_claim(o, out, n, report_dir / f"{claim_set.family}_{o.claim.id}.png")
             for o in outcomes if o.claim.plot}
    command = f"fedclock reproduce {family if Path(family).suffix != '.yaml' else claim_file.name}" + (
        f" --seeds {n}" if seeds is not None else "") + "".join(f" --set {t}" for t in sets)
    path = report_dir / f"{claim_set.family}.md"
    path.write_text(report_text(claim_set, outcomes, n, command, source_commit(), plots), encoding="utf-8")
    return path, outcomes


def source_commit() -> str:
    """The git commit of this source tree (with ``+changes`` when tracked files differ from it)."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "diff", "--quiet", "HEAD"],  # tracked files of the repo
                               capture_output=True, check=False).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" +changes" if dirty else "")


def _pm(values: Sequence[float], scale: float, unit: str = "") -> str:
    x = np.asarray(values, dtype=float) * scale
    return f"{report_number(x.mean(), unit)} ± {report_number(x.std(ddof=1), unit)}"


def report_number(value: float, unit: str, sign: str = "", decimals: int = 2) -> str:
    """One number of the report: ``decimals`` places, or 3 significant digits in virtual
    seconds, whose scale is the modelled device's (a digits MLP's round takes microseconds
    at GPU speed); ``sign`` ``"+"`` always shows it."""
    return f"{value:{sign}.3g}" if unit == "virtual s" else f"{value:{sign}.{decimals}f}"


def _shown(value: float, claim: Claim, sign: str = "", decimals: int = 2) -> str:
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


def report_text(claim_set: ClaimSet, outcomes: Sequence[Outcome], seeds: int, command: str, commit: str,
                plots: dict[str, Path]) -> str:
    """The report's Markdown (see the module docstring)."""
    lines = [f"# Reproduction report: {claim_set.title}", "",
             f"*Generated by `{command}` at commit `{commit}` — do not edit by hand; rerun the command.*", "",
             f"Paper: {claim_set.paper}", ""]
    if claim_set.notes:
        lines += [claim_set.notes.strip(), ""]
    lines += [
        f"Every number is over {seeds} seeds (0..{seeds - 1}), paired: for one seed, A and B share the partition, "
        "the clients' test splits and the initial model. *ours*: mean ± std (ddof 1) over seeds; *A − B*: the mean "
        f"paired difference with its {int(CONFIDENCE * 100)} % Student-t confidence interval; *detectable*: the "
        f"difference this test would detect with {int(POWER * 100)} % power at two-sided alpha "
        f"{1 - CONFIDENCE:.2f}, (t(0.975, n−1) + t(0.80, n−1)) × SE of the paired differences (5.4 SE at 3 seeds; "
        "2.8 SE for many seeds). Verdict: *holds* when the interval excludes 0 on the claimed side; *does not hold* "
        "when it excludes 0 on the other side or lies within ± the claim's margin (for an equality claim: holds "
        "when within ± margin, does not hold when it excludes 0 and is not within the margin); otherwise *cannot "
        "tell at this power*. Accuracies in % points, rounds in server versions, time in virtual seconds, "
        "CKA x 100.", "",
        "| claim | paper (source) | metric | A | B | ours A | ours B | A − B [95 % CI] | detectable | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        c = o.claim
        k, u = c.scale, c.unit
        b_text = f"`{c.b}`" if c.b is not None else f"ref. {c.reference * k:g}" if c.reference is not None else ""
        lines.append("| " + " | ".join([
            f"{c.id}{' (ablation)' if c.ablation else ''}", f"{c.paper} ({c.source})", _metric_text(c), f"`{c.a}`",
            b_text, _pm(o.a, k, u), _pm(o.b, k, u) if o.b is not None else "–",
            f"{_shown(o.stats.mean, c, '+')} [{_shown(o.stats.low, c, '+')}, {_shown(o.stats.high, c, '+')}]",
            _shown(o.stats.detectable, c), f"**{o.verdict}**"]) + " |")
    lines += ["", "## Claims", ""]
    for o in outcomes:
        c = o.claim
        k = c.scale
        lines += [f"### {c.id}{' (ablation)' if c.ablation else ''}", "",
                  f"- Paper ({c.source}): {c.statement} — {c.paper}",
                  f"- Setting: {_setting_text(o.setting)}",
                  f"- Metric: {_metric_text(c)} ({c.unit}); claimed: A {_claimed(c)}",
                  f"- A = `{c.a}` per seed: {', '.join(_shown(v, c) for v in o.a)}"]
        if o.b is not None:
            lines.append(f"- B = `{c.b}` per seed: {', '.join(_shown(v, c) for v in o.b)}")
        if any(o.unreached):
            lines.append(f"- Seeds that never reached {c.target}: A {o.unreached[0]}, B {o.unreached[1]} "
                         "(counted at their last evaluation)")
        lines += [f"- A − B: {_shown(o.stats.mean, c, '+', 3)}, 95 % CI [{_shown(o.stats.low, c, '+', 3)}, "
                  f"{_shown(o.stats.high, c, '+', 3)}], SE {_shown(o.stats.se, c, '', 3)}; detectable at 80 % power: "
                  f"{_shown(o.stats.detectable, c, '', 3)}; "
                  f"margin ± {c.margin * k:g}",
                  f"- Verdict: **{o.verdict}**"]
        if c.id in plots:
            lines += ["", f"![{c.id}]({plots[c.id].name})"]
        lines.append("")
    return "\n".join(lines)


def _metric_text(c: Claim) -> str:
    if c.b_metric is not None:
        return f"{c.metric} (A) vs {c.b_metric} (B)"
    return f"{c.metric} ≥ {c.target:g}" if c.target is not None else c.metric


def _claimed(c: Claim) -> str:
    other = f"`{c.b}`" if c.b is not None else f"{(c.reference or 0.0) * c.scale:g}"
    word = {"greater": ">", "less": "<", "equal": "≈"}[c.direction]
    return f"{word} {other}" + (f" (within ± {c.margin * c.scale:g})" if c.direction == "equal" else "")


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
    column = "personal_accuracy_mean" if c.metric.endswith("_personal") else "global_accuracy"
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in [c.a] + ([c.b] if c.b is not None else []):
        frames = [_metrics(o.setting.run_dir(out, name, s)).dropna(subset=[column]) for s in range(seeds)]
        versions = sorted(set.intersection(*(set(f["version"]) for f in frames)))
        curves = np.array([f.drop_duplicates("version", keep="last").set_index("version").loc[versions, column]
                           for f in frames], dtype=float) * 100
        mean, std = curves.mean(axis=0), curves.std(axis=0, ddof=1)
        ax.plot(versions, mean, label=f"{name} (n={seeds})")
        ax.fill_between(versions, mean - std, mean + std, alpha=0.2)
    if c.reference is not None:
        ax.axhline(c.reference * 100, color="grey", linestyle="--", label="paper")
    ax.set_xlabel("server version")
    ax.set_ylabel(f"{'mean personalized' if column.startswith('personal') else 'global'} accuracy (%)")
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
