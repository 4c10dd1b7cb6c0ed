"""Claim sets: what ``fedclock reproduce FAMILY`` checks, one YAML file per paper family.

A claim set lives in ``scenarios/reproductions/FAMILY.yaml`` (shipped; ``fedclock reproduce
FAMILY``) or in any file given by path (``fedclock reproduce path/to/set.yaml``). Its format::

    family: spfl_plga                      # the report is docs/reproductions/<family>.md
    title: "SPFL / LGA / PLGA (Xie et al. 2021)"
    paper: "C. Xie et al., ..."            # the citation printed at the top of the report
    seeds: 3                               # default seeds per (scenario, run); --seeds overrides
    overrides: {stop.versions: 25}         # --set-style overrides for every scenario (optional)
    notes: "free text printed under the title (optional)"
    margin: 0.01                           # margin of claims with neither margin: nor paper_effect:
    paper_setting:                         # the paper's setting per scenario file (optional), keyed
      library/spfl_plga/table2_plga_quick: # by a claim's scenario: exactly as written there
        source: "Sec. 5.1"
        fields:
          clients: {paper: 100, ours: population.num_clients, source: "Sec. 5.1"}
          lr: {paper: 0.001, ours: algorithm.lr, runs: [plga], note: "0.001 does not train in 25 versions"}
          momentum: {paper: null, ours: algorithm.momentum}   # null: the paper does not state it
    claims:
    - id: t2-plga-vs-fedasync              # unique, [A-Za-z0-9_.-]
      source: "Table 2"                    # table / figure / section of the paper
      statement: "PLGA beats FedAsync"     # the paper's statement, short
      paper: "97.25 vs 93.82"              # the paper's number(s), as text
      scenario: library/spfl_plga/table2_plga_quick   # a shipped name or a path (relative paths:
                                                      # to the claim file's folder, then the cwd)
      a: plga                              # run name of the file (the file's name if it has no runs:)
      b: fedasync                          # the run compared against (omit for a single cell)
      metric: final_global                 # see METRICS
      b_metric: linear_personalization_zero  # B's metric when it differs from A's (optional; then b
                                           # may name A's own run: two probes of one run, paired)
      direction: greater                   # greater | less | equal: the claimed sign of A - B
      paper_effect: 0.0343                 # the paper's A - B (or A - reference) in the metric's unit
                                           # (accuracy as a fraction, versions, virtual s, CKA fraction)
      margin: 0.01                         # margin in the metric's unit (default: the rule below)
      pairing: paired                      # paired | unpaired (A and B see different data: Welch)
      target: 0.8                          # only for rounds_to_target / time_to_target
      reference: 0.9725                    # single cell only: the paper's number in the metric's unit
      overrides: {dataset.name: mnist1d}   # this claim's own overrides (merged over the family's)
      plot: true                           # also draw A's and B's curves (PNG beside the report)
      ablation: true                       # mark the row as an ablation (component off)
      seeds: 10                            # this claim's seed count (default the set's; --seeds
                                           # overrides both): only its own runs get the extra seeds
      why_not: "..."                       # one sentence: why the row does not hold at the scale run
                                           # (the report's header lists every row that does not
                                           # hold with it; written after seeing the verdict)

The margin (:meth:`Claim.margin_for`; every report prints the rule): a directional claim
with ``paper_effect`` uses half of |paper_effect| unless it gives ``margin``, which may not
exceed |paper_effect| (refused at load); a directional claim without ``paper_effect``, and an
equality claim, use its ``margin`` or else the set's ``margin``. On an equality claim
``paper_effect`` is the paper's own small gap, shown on the report's size axis.

Metrics (``metric:``), each per (run, seed) from ``metrics.parquet``:

* ``final_global`` / ``final_personal`` / ``final_adapted``: global accuracy / mean
  personalized accuracy (each algorithm's own personalized model) / mean accuracy after
  the same local adaptation for every method (column ``adapted_accuracy_mean``) at the last
  evaluation;
* ``auc_global`` / ``auc_personal`` / ``auc_adapted``: the mean of that accuracy over the
  run's evaluations (area under the accuracy curve per evaluation);
* ``rounds_to_target`` / ``time_to_target``: the server version / virtual seconds of the
  first evaluation with global accuracy >= ``target``; a seed that never reaches it is
  censored (+inf, never a value; :mod:`fedclock.scenarios.claim_stats`), and the report says
  on how many seeds each side reached it;
  ``rounds_to_target_personal`` / ``time_to_target_personal``: the same with the mean
  personalized accuracy (FedReCo's Table 2 times personalized methods to 85 %);
* ``linear_generalization`` / ``linear_transfer`` / ``linear_personalization`` /
  ``linear_personalization_swapped`` / ``linear_personalization_zero`` /
  ``linear_personalization_content``: a self-supervised run's final linear evaluation, the
  ``average`` row of that kind in ``linear_eval.parquet`` (:mod:`fedclock.scenarios.linear_eval`;
  the last three need ``evaluation.linear.style_controls``).
* ``cka_depth_drop`` / ``cka_rise`` / ``cka_head_gap``: a run's ``cka.parquet``
  (``analysis: cka``, :mod:`fedclock.scenarios.analysis`), the per-layer CKA between each
  client's local model and the global model averaged over the clients (FedReCo Fig. 2):
  the first layer's CKA minus the last layer's at the first measured version (similarity
  falls with depth); the mean over layers of the CKA at the last measured version minus that
  at the first (similarity rises with training); the mean CKA of every layer but the last
  minus the last layer's at the last measured version (the classifier stays apart). Shown
  as CKA x 100; a claim with ``plot: true`` draws CKA against layer per measured version.
* ``norm_gain``: the mean over the run's evaluations of ``update_norm_gain``, how much
  FedMRUR's normalized aggregation lengthens the plain mean of the client updates (Sec. 3.2,
  Fig. 2; :func:`fedclock.algorithms.momentum.norm_gain`), a ratio shown as is.

A claim compares A with B paired by seed (same partition and initial model: both come from
the scenario seed only, see :mod:`fedclock.scenarios.data.federation` and
:mod:`fedclock.scheduling.rng`), or, without ``b``, A with the number ``reference``. When A's
and B's runs differ in what defines the data a seed sees (the ``dataset`` section,
``population.num_clients``, ``seed``) a seed pairs nothing: such a claim must say
``pairing: unpaired`` (Welch's interval), else ``fedclock reproduce`` refuses it. The
statistics and verdict rule are in :mod:`fedclock.scenarios.claim_stats`.

``paper_setting`` states the paper's setting as data: per scenario file, fields of
``paper`` (the paper's value; null when the paper does not state it), ``ours`` (a dotted
path into the resolved scenario, e.g. ``population.num_clients``, ``algorithm.lr``,
``dataset.partition.alpha``, ``stop.rounds``), ``source`` (where in the paper), ``runs``
(only these runs, e.g. one algorithm's own constant) and ``note`` (why ours differs). The
report prints it as a table with our values read from the resolved runs (never typed).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

METRICS = ("final_global", "final_personal", "final_adapted", "auc_global", "auc_personal", "auc_adapted",
           "rounds_to_target", "time_to_target",
           "rounds_to_target_personal", "time_to_target_personal",
           "linear_generalization", "linear_transfer", "linear_personalization", "linear_personalization_swapped",
           "linear_personalization_zero", "linear_personalization_content", "cka_depth_drop", "cka_rise",
           "cka_head_gap", "norm_gain")
"""The metrics a claim may compare."""

Metric = Literal["final_global", "final_personal", "final_adapted", "auc_global", "auc_personal", "auc_adapted",
                 "rounds_to_target",
                 "time_to_target", "rounds_to_target_personal", "time_to_target_personal", "linear_generalization",
                 "linear_transfer", "linear_personalization",
                 "linear_personalization_swapped", "linear_personalization_zero",
                 "linear_personalization_content", "cka_depth_drop", "cka_rise", "cka_head_gap", "norm_gain"]
Direction = Literal["greater", "less", "equal"]
Pairing = Literal["paired", "unpaired"]

SCORING = {
    "global": "the bare global model",
    "personal": "each algorithm's own personalized model (as the paper's tables)",
    "adapted": "every method adapted by the same local steps",
    "linear": "a linear probe on the frozen encoder",
    "cka": "CKA of each client's local model against the global model",
    "server": "the server's aggregation of the client updates",
}
"""What a metric scores (:func:`scoring`), by kind."""

ACCURACY_COLUMN = {"global": "global_accuracy", "personal": "personal_accuracy_mean",
                   "adapted": "adapted_accuracy_mean"}
"""The ``metrics.parquet`` column an accuracy metric reads, by kind."""

SERVER_COLUMN = {"norm_gain": "update_norm_gain"}
"""The ``metrics.parquet`` column a server metric (kind ``server``) averages over the run."""


def metric_kind(metric: str) -> str:
    """``global``, ``personal``, ``adapted``, ``linear``, ``cka`` or ``server``: what the metric scores."""
    if metric in SERVER_COLUMN:
        return "server"
    if metric.startswith(("linear_", "cka_")):
        return metric.split("_", 1)[0]
    for kind in ("personal", "adapted"):
        if metric.endswith(f"_{kind}"):
            return kind
    return "global"


def scoring(metric: str) -> str:
    """The scoring of a metric in words (:data:`SCORING`)."""
    return SCORING[metric_kind(metric)]


class SettingField(BaseModel):
    """One field of the paper's setting against the run's (``paper_setting``, module docstring)."""

    model_config = ConfigDict(extra="forbid")

    paper: str | int | float | bool | None
    """The paper's value; None: the paper does not state it."""
    ours: str = Field(pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")
    """A dotted path into the resolved scenario, e.g. ``algorithm.lr``."""
    source: str = ""
    """Where in the paper."""
    runs: list[str] | None = None
    """Only these runs (e.g. one algorithm's own constant); None: every run the claims use."""
    note: str = ""
    """Why ours differs."""


class PaperSetting(BaseModel):
    """The paper's setting of one scenario file (``paper_setting``, module docstring)."""

    model_config = ConfigDict(extra="forbid")

    source: str = ""
    fields: dict[str, SettingField]


class ClaimError(Exception):
    """A claim set that cannot be read; the message is one line naming the file and field."""


class Claim(BaseModel):
    """One claim of a paper, and the runs that test it (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    source: str
    statement: str
    paper: str
    scenario: str
    a: str
    b: str | None = None
    metric: Metric
    b_metric: Metric | None = None
    direction: Direction
    margin: float | None = Field(None, gt=0)
    paper_effect: float | None = None
    pairing: Pairing = "paired"
    target: float | None = None
    reference: float | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    plot: bool = False
    ablation: bool = False
    seeds: int | None = Field(None, ge=2, le=100)
    """This claim's seed count (its runs get seeds 0..n-1; default the set's ``seeds:``; ``--seeds``
    overrides both): a row whose paired spread needs more seeds than the rest of the set."""
    why_not: str = ""
    """One sentence: why this row does not hold (or cannot tell, or is identical) at the scale
    run; the report's header lists every such row with it (:func:`fedclock.scenarios.reproduce.report_text`)."""

    @model_validator(mode="after")
    def _consistent(self) -> Claim:
        if "\n" in self.why_not.strip():
            raise ValueError("why_not: one sentence on one line (got several lines)")
        if _counts(self.metric) and self.target is None:
            raise ValueError(f"metric {self.metric} needs target: (an accuracy in (0, 1])")
        if self.target is not None and not 0 < self.target <= 1:
            raise ValueError(f"target: must be an accuracy in (0, 1] (got {self.target})")
        if self.b is None and self.reference is None:
            raise ValueError("give b: (the run compared against) or reference: (the paper's number, single cell)")
        if self.b is not None and self.reference is not None:
            raise ValueError("give b: or reference:, not both")
        if self.b_metric is not None and self.b is None:
            raise ValueError("b_metric: needs b: (the run it is measured on)")
        if self.b_metric is not None and self.unit != _unit(self.b_metric):
            raise ValueError(f"b_metric: {self.b_metric} is not in the unit of metric {self.metric}")
        if self.pairing == "unpaired" and self.b is None:
            raise ValueError("pairing: unpaired needs b: (a single cell has nothing to pair)")
        e = self.paper_effect
        if e is not None and self.direction != "equal":
            if (e <= 0 if self.direction == "greater" else e >= 0):
                raise ValueError(f"paper_effect: {e:g} contradicts direction {self.direction} "
                                 f"(the paper's A - B must be {'> 0' if self.direction == 'greater' else '< 0'})")
            if self.margin is not None and self.margin > abs(e):
                raise ValueError(f"margin: {self.margin:g} is larger than |paper_effect| {abs(e):g} "
                                 "(allowed: at most the paper's effect; default half of it)")
        return self

    def margin_for(self, set_margin: float) -> float:
        """The margin this claim's verdict uses: explicit ``margin``; else, for a directional
        claim with ``paper_effect``, half of |paper_effect|; else the set's ``margin``."""
        if self.margin is not None:
            return self.margin
        if self.direction != "equal" and self.paper_effect is not None:
            return abs(self.paper_effect) / 2
        return set_margin

    def margin_origin(self) -> str:
        """Where :meth:`margin_for` takes the margin from, in words."""
        if self.margin is not None:
            return "the claim's margin"
        if self.direction != "equal" and self.paper_effect is not None:
            return "half the paper's effect"
        return "the set's margin"

    @property
    def metric_of_b(self) -> Metric:
        """The metric measured on B (``b_metric``, else A's)."""
        return self.b_metric if self.b_metric is not None else self.metric

    @property
    def unit(self) -> str:
        """The unit the metric is shown in."""
        return _unit(self.metric)

    @property
    def scale(self) -> float:
        """Factor from the metric's value to the unit shown (accuracies in %)."""
        return 1.0 if _counts(self.metric) or self.metric in SERVER_COLUMN else 100.0


def _counts(metric: str) -> bool:
    """Whether the metric is a version or a time to a target accuracy (not an accuracy)."""
    return metric.startswith(("rounds_to_target", "time_to_target"))


def _unit(metric: str) -> str:
    if metric in SERVER_COLUMN:
        return "ratio"
    if metric.startswith("cka_"):
        return "CKA x 100"
    if _counts(metric):
        return "versions" if metric.startswith("rounds_") else "virtual s"
    return "% points"


class ClaimSet(BaseModel):
    """A paper family's claims (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    family: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    title: str
    paper: str
    seeds: int = Field(3, ge=2, le=100)
    overrides: dict[str, Any] = Field(default_factory=dict)
    notes: str = ""
    margin: float = Field(0.01, gt=0)
    """Margin of the claims without their own and without the paper's effect (metric units)."""
    paper_setting: dict[str, PaperSetting] = Field(default_factory=dict)
    """The paper's setting per scenario file, keyed by a claim's ``scenario:`` as written."""
    claims: list[Claim] = Field(min_length=1)

    @field_validator("claims")
    @classmethod
    def _unique(cls, claims: list[Claim]) -> list[Claim]:
        seen: set[str] = set()
        for c in claims:
            if c.id in seen:
                raise ValueError(f"claim id {c.id!r} appears twice")
            seen.add(c.id)
        return claims

    @model_validator(mode="after")
    def _settings_of_claimed_scenarios(self) -> ClaimSet:
        scenarios = {c.scenario for c in self.claims}
        for key in self.paper_setting:
            if key not in scenarios:
                raise ValueError(f"paper_setting: {key!r} is no claim's scenario: (allowed: "
                                 f"{', '.join(sorted(scenarios))})")
        return self


def claims_dir() -> Path:
    """Where the shipped claim sets live."""
    return Path(__file__).parent / "reproductions"


def shipped_families() -> list[str]:
    """The names of the shipped claim sets."""
    return sorted(p.stem for p in claims_dir().glob("*.yaml"))


def claim_set_path(family: str) -> Path:
    """A shipped family's file, or ``family`` itself when it is a file."""
    path = Path(family)
    if path.is_file():
        return path
    shipped = claims_dir() / f"{family}.yaml"
    if shipped.is_file():
        return shipped
    raise ClaimError(f"reproduce: no claim set {family!r} (shipped: {', '.join(shipped_families()) or 'none'}; "
                     "or give a claim file's path)")


def load_claim_set(family: str) -> tuple[ClaimSet, Path]:
    """The validated claim set of ``family`` (a shipped name or a path) and its file."""
    path = claim_set_path(family)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ClaimError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(raw, dict):
        raise ClaimError(f"{path}: a claim set is a mapping with family:, title:, paper:, claims:")
    try:
        return ClaimSet.model_validate(raw), path
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(_where(raw, err["loc"]))
        raise ClaimError(f"{path}: {where or 'claim set'}: {err['msg']}") from None


def _where(raw: dict[str, Any], loc: tuple[int | str, ...]) -> list[str]:
    """The error's location, with a claim's index replaced by its id when it has one."""
    parts: list[str] = []
    node: Any = raw
    for key in loc:
        if isinstance(key, int) and isinstance(node, list) and key < len(node):
            item = node[key]
            ident = item.get("id") if isinstance(item, dict) else None
            parts.append(f"[{ident}]" if isinstance(ident, str) and re.match(r"^[\w.-]+$", ident) else f"[{key}]")
            node = item
        else:
            parts.append(str(key))
            node = node.get(key) if isinstance(node, dict) else None
    return [p for p in parts if p]
