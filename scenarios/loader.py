"""Scenario files: YAML → validated :class:`Scenario` objects, with one-line errors.

A file describes one run, or several runs to compare under ``runs:``. Each entry of
``runs`` is merged over the rest of the file (nested sections merge key by key; a section
whose ``type``/``name``/``dist`` differs from the base's replaces it whole, so the fields of
another mode or algorithm never leak in). ``--set a.b=v`` overrides a field in every run;
``--set runs.NAME.a.b=v`` in one run. Values given to ``--set`` are read as YAML scalars.

Top-level ``seeds: [0, 1, ...]`` (or ``repeats: N``, short for ``seeds: [0, ..., N-1]``) runs
every run once per seed: the suite holds one :class:`Scenario` per (run, seed), run by run,
each with its ``seed`` set. The two are exclusive with each other and with an explicit
``seed:`` other than the default 0 anywhere in the file or in ``--set``. ``--set seeds=[...]``
or ``--set repeats=N`` replaces whichever of the two the file gives.

Every mistake raises :class:`ScenarioError` whose message is one line naming the file, the
run, the field, the bad value and what is allowed.
"""
from __future__ import annotations

import copy
import re
import types
import typing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Sequence, Union

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from fedclock.algorithms.compressed import links_problem
from fedclock.algorithms.privacy import privacy_problem
from fedclock.scenarios.privacy_accounting import run_privacy_problem
from fedclock.algorithms.registry import ALGORITHMS, algorithm_names, get_algorithm
from fedclock.algorithms.models import MODEL_NAMES
from fedclock.algorithms.vectorized import is_vectorizable, vectorize_problem
from fedclock.scenarios.analysis import analysis_problem
from fedclock.scenarios.plugins import PluginError, algorithm_class, find, from_object, variant_class
from fedclock.scenarios.selection_config import resolve_selection, selection_problem
from fedclock.scenarios.data.dataset_specs import DATASET_NAMES
from fedclock.scenarios.data.datasets import check_loader
from fedclock.algorithms.server_optimizers import ServerOptimizerConfig
from fedclock.scenarios.schema import AlgorithmConfig, Scenario, ServerOptimizerSection

DISCRIMINATORS = ("type", "name", "dist")
_RELATIVE_FIELD = re.compile(r"^[A-Za-z_][\w.\[\]]*: ")
_FOLDER_NAME = re.compile(r"^[A-Za-z0-9_.\-]*[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$")


class ScenarioError(Exception):
    """A mistake in a scenario file or override; the message is one line for the user."""


@dataclass(frozen=True)
class Suite:
    """The runs a scenario file declares."""

    name: str
    description: str
    runs: tuple[Scenario, ...]
    source: str
    seeds: tuple[int, ...] | None = None
    """The file's ``seeds:`` (or ``repeats:`` expanded); None for the single-seed form."""


# --------------------------------------------------------------------------- reading
_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when PyYAML has it


class _UniqueKeyLoader(_SafeBase):
    """Safe YAML loader that rejects a key repeated in one mapping (PyYAML would silently
    keep the last one, so ``lr`` given twice would hide a mistake)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: the base constructor reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (each key may appear once per section)", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file safely (no object tags)."""
    if not path.is_file():
        raise ScenarioError(f"scenario file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read file ({exc.__class__.__name__}: {exc})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{path}: invalid YAML{where}: {problem}") from None


Override = Union[str, tuple[str, Any]]
"""``"key=value"`` as given to ``--set``, or a ``(key, value)`` pair (Python API)."""


def load_suite(path: str | Path, overrides: Sequence[Override] = (), imports: bool = True) -> Suite:
    """Load and validate every run of a scenario file (see :func:`parse_suite` for ``imports``)."""
    path = Path(path)
    return parse_suite(read_yaml(path), str(path), overrides, default_name=path.stem, base_dir=path.parent,
                       imports=imports)


def parse_suite(raw: Any, source: str, overrides: Sequence[Override] = (), default_name: str = "scenario",
                base_dir: Path | None = None, imports: bool = True) -> Suite:
    """Validate already-parsed YAML. Relative trace paths are read from ``base_dir`` (the
    scenario file's folder), else from the working directory. A ``module:attribute`` name
    (a user's algorithm, model or dataset) or an installed plugin's name imports that
    module, which runs its code; with ``imports=False`` nothing is imported and what such
    a name's code would check (the algorithm's own fields, the modes it runs in) is left
    unchecked (:func:`not_imported` lists those names)."""
    check_expansion(raw, source)
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else f"a {'list' if isinstance(raw, list) else type(raw).__name__}"
        raise ScenarioError(f"{source}: the file must be a mapping of sections such as name:, algorithm:, stop: "
                            f"(got {got})")
    base = copy.deepcopy(raw)
    runs_raw = base.pop("runs", None)
    overrides, seeds = _seeds(base, runs_raw, overrides, source)
    base.setdefault("name", default_name)
    suite_name = str(base["name"])
    if runs_raw is not None and not _FOLDER_NAME.match(suite_name):
        raise ScenarioError(f"{source}: name: {_short(base['name'])} names the suite's results folder: letters, "
                            f"digits, _ . - and not only dots")
    description = str(base.get("description", ""))
    parsed = [(_parse_override(o, source), o if isinstance(o, str) else f"{o[0]}={o[1]!r}") for o in overrides]
    if runs_raw is None:
        merged = [(None, base)]
    else:
        if not isinstance(runs_raw, list) or not runs_raw:
            raise ScenarioError(f"{source}: runs: must be a non-empty list of runs (got {runs_raw!r})")
        merged = []
        for i, run in enumerate(runs_raw):
            if not isinstance(run, dict) or not isinstance(run.get("name"), str):
                raise ScenarioError(f"{source}: runs[{i}]: each run must be a mapping with a 'name' (got {run!r})")
            data = copy.deepcopy(base)
            for key, value in run.items():
                data[key] = merge(data[key], value) if key in data else copy.deepcopy(value)
            merged.append((run["name"], data))
        names: list[str] = [run["name"] for run in runs_raw]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ScenarioError(f"{source}: runs: run names must be unique (repeated: {', '.join(dupes)})")
    scenarios = []
    for run_name, data in merged:
        for (keys, value), text in parsed:
            if keys[0] == "runs":
                if len(keys) < 3:
                    raise ScenarioError(f"{source}: --set {text}: use runs.RUN_NAME.field=value")
                if runs_raw is None:
                    raise ScenarioError(f"{source}: --set {text}: this file has no runs: section; "
                                        f"use --set {'.'.join(keys[2:])}=... to set it")
                if keys[1] not in {n for n, _ in merged}:
                    allowed = ", ".join(str(n) for n, _ in merged)
                    raise ScenarioError(f"{source}: --set {text}: no run named {keys[1]!r} (allowed: {allowed})")
                if keys[1] != run_name:
                    continue
                keys = keys[2:]
            _set_path(data, keys, value, source, text)
        where = f"{source}: run {run_name!r}" if run_name is not None else source
        if seeds is None:
            scenarios.append(validate_scenario(data, where, base_dir, imports))
            continue
        if data.get("seed", 0) != 0:
            raise ScenarioError(f"{where}: seed: {_short(data['seed'])} cannot be combined with seeds:/repeats: "
                                f"(list every seed in seeds:, e.g. seeds: [{_short(data['seed'])}])")
        for s in seeds:
            scenarios.append(validate_scenario({**data, "seed": s}, f"{where} seed {s}", base_dir, imports))
    return Suite(name=suite_name, description=description, runs=tuple(scenarios), source=source, seeds=seeds)


MAX_DEPTH = 100
"""How deep lists and mappings may nest in a scenario file (deeper ones are refused before
any recursive walk reaches Python's recursion limit)."""
MAX_ALIAS_VALUES = 100_000
"""How many values YAML aliases may add to a file beyond the values written in it."""


def check_expansion(raw: Any, source: str) -> None:
    """Refuse parsed YAML whose aliases expand it by more than :data:`MAX_ALIAS_VALUES` values
    (nested aliases, "billion laughs": 400 bytes that stand for 9**9 values, which any walk
    over the data would take hours to visit) or that contains itself (``a: &a [*a]``). An
    alias is a shared Python object, so this counts each distinct list or mapping once
    (memoized by identity): linear in the file. Nesting deeper than :data:`MAX_DEPTH` is
    refused too."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    distinct = 0

    def size(node: Any, depth: int) -> int:
        nonlocal distinct
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise ScenarioError(f"{source}: a YAML alias refers to itself (a section that contains itself); "
                                f"write the values out")
        if depth > MAX_DEPTH:
            raise ScenarioError(f"{source}: sections nested more than {MAX_DEPTH} levels deep; a scenario needs "
                                f"a few")
        on_path.add(key)
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1 + sum(size(child, depth + 1) for child in children)
        on_path.discard(key)
        distinct += 1 + len(children)
        sizes[key] = total
        return total

    total = size(raw, 0)
    if total - distinct > MAX_ALIAS_VALUES:
        raise ScenarioError(f"{source}: YAML aliases (*name) expand this file to {total:,} values, more than "
                            f"{MAX_ALIAS_VALUES:,} beyond the values written in it (nested aliases?); "
                            f"write the values out or use fewer aliases")


MAX_REPEATS = 10_000
"""``repeats:`` (runs of every run of a file)."""

SEED_KEYS = ("seeds", "repeats")


def _seeds(base: dict, runs_raw: Any, overrides: Sequence[Override],
           source: str) -> tuple[list[Override], tuple[int, ...] | None]:
    """Take ``seeds``/``repeats`` out of the file's top level (and out of ``--set``; see the
    module docstring) and return the other overrides and the seeds (None when neither is given)."""
    rest: list[Override] = []
    for text in overrides:
        keys, value = _parse_override(text, source)
        if keys[0] in SEED_KEYS and len(keys) == 1:
            for key in SEED_KEYS:
                base.pop(key, None)
            base[keys[0]] = value
        else:
            rest.append(text)
    if isinstance(runs_raw, list):
        for i, run in enumerate(runs_raw):
            for key in SEED_KEYS:
                if isinstance(run, dict) and key in run:
                    raise ScenarioError(f"{source}: runs[{i}].{key}: set {key}: at the top level of the file (it "
                                        f"applies to every run)")
    given = [k for k in SEED_KEYS if k in base]
    if not given:
        return rest, None
    if len(given) == 2:
        raise ScenarioError(f"{source}: seeds: and repeats: exclude each other (repeats: N means seeds: [0, ..., N-1])")
    value = base.pop(given[0])
    if given[0] == "repeats":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPEATS:
            raise ScenarioError(f"{source}: repeats: must be a whole number from 1 to {MAX_REPEATS} "
                                f"(got {_short(value)})")
        return rest, tuple(range(value))
    if not isinstance(value, list) or not value or \
            any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**63 for s in value):
        raise ScenarioError(f"{source}: seeds: must be a non-empty list of whole numbers from 0 to 2**63-1 "
                            f"(got {_short(value)})")
    if len(set(value)) != len(value):
        raise ScenarioError(f"{source}: seeds: each seed may appear once (repeated: "
                            f"{', '.join(str(s) for s in sorted({s for s in value if value.count(s) > 1}))})")
    return rest, tuple(value)


def merge(base: Any, over: Any) -> Any:
    """Merge ``over`` into a copy of ``base`` (see the module docstring)."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return copy.deepcopy(over)
    for key in DISCRIMINATORS:
        if key in over and key in base and over[key] != base[key]:
            return copy.deepcopy(over)
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if key in out else copy.deepcopy(value)
    return out


def _parse_override(text: str | tuple[str, Any], source: str) -> tuple[list[str], Any]:
    if isinstance(text, tuple):  # (dotted key, value) from the Python API; text values read as --set reads them
        key, value = text
        keys, parsed = _parse_override(f"{key}={value}", source) if isinstance(value, str) else (key.split("."), value)
        if not all(keys):
            raise ScenarioError(f"overrides: empty part in key {key!r}")
        return keys, parsed
    if "=" not in text:
        raise ScenarioError(f"--set {text}: expected key=value, e.g. --set algorithm.lr=0.1")
    key, _, value = text.partition("=")
    keys = [k for k in key.strip().split(".")]
    if not all(keys):
        raise ScenarioError(f"--set {text}: empty part in key {key!r}")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return keys, parsed


def _set_path(data: dict, keys: list[str], value: Any, source: str, text: str) -> None:
    node: Any = data
    for i, k in enumerate(keys[:-1]):
        if isinstance(node, list):
            if not k.isdigit() or int(k) >= len(node):
                raise ScenarioError(f"--set {text}: {'.'.join(keys[:i + 1])} is not an index of the list")
            node = node[int(k)]
            if not isinstance(node, (dict, list)):
                raise ScenarioError(f"--set {text}: {'.'.join(keys[:i + 1])} is a value, not a section")
            continue
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, (dict, list)):
            raise ScenarioError(f"--set {text}: {'.'.join(keys[:i + 1])} is a value, not a section")
        node = nxt
    last = keys[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ScenarioError(f"--set {text}: {'.'.join(keys)} is not an index of the list")
        node[int(last)] = value
    else:
        node[last] = value


# --------------------------------------------------------------------------- validation
def not_imported(scenario: Scenario) -> list[str]:
    """The ``field name`` of each name in ``scenario`` that only importing could check (a
    user's or an installed plugin's algorithm, model or dataset)."""
    named = (("algorithm.name", scenario.algorithm.name, ALGORITHMS), ("model.name", scenario.model.name, MODEL_NAMES),
             ("dataset.name", scenario.dataset.name, DATASET_NAMES))
    return [f"{field} {name}" for field, name, builtin in named if name not in builtin]


def validate_scenario(data: dict, where: str, base_dir: Path | None = None, imports: bool = True) -> Scenario:
    """Validate one run's merged data (relative trace paths are read from ``base_dir``; for
    ``imports`` see :func:`parse_suite`)."""
    _check_keys(data, where)
    data = dict(data)
    algo = data.get("algorithm")
    if algo is None:
        raise ScenarioError(f"{where}: algorithm: missing section (e.g. algorithm: {{name: fedavg}})")
    if not isinstance(algo, dict):
        raise ScenarioError(f"{where}: algorithm: must be a mapping with a name (got {algo!r})")
    algo = dict(algo)
    name = algo.pop("name", None)
    if not imports:
        return _validate_without_imports(data, name, where, base_dir)
    try:
        if name is not None and not isinstance(name, str):
            plugin = from_object("algorithm", name)
            name, cls = plugin.name, plugin.obj
        elif not isinstance(name, str):
            raise ScenarioError(f"{where}: algorithm.name: missing or not a string (got {name!r})")
        else:
            cls = algorithm_class(name, base_dir)
        data = _resolve_named(data, base_dir)
    except PluginError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    server_optimizer = _server_optimizer(algo.pop("server_optimizer", None), cls, name, where)
    try:
        params = cls.Params.model_validate(algo)
    except ValidationError as exc:
        raise ScenarioError(f"{where}: {format_error(exc, cls.Params, ('algorithm',))}") from None
    _no_bool_numbers(params, algo, where, ("algorithm",))
    objective = getattr(params, "objective", None)  # only ObjectiveParams have the field
    if objective is not None and objective not in cls.objectives:
        raise ScenarioError(f"{where}: algorithm.objective: algorithm {name!r} does not train with {objective!r} "
                            f"(allowed: {', '.join(sorted(cls.objectives))})")
    data["algorithm"] = AlgorithmConfig(name=name, params=params, server_optimizer=server_optimizer)
    if "selection" in data:
        try:
            data["selection"] = resolve_selection(data["selection"], base_dir, format_error)
        except ValueError as exc:
            raise ScenarioError(f"{where}: {exc}") from None
    try:
        scenario = Scenario.model_validate(data, context={"base_dir": base_dir,
                                                          "plugins": partial(variant_class, base_dir=base_dir)})
    except ValidationError as exc:
        raise ScenarioError(f"{where}: {format_error(exc, Scenario)}") from None
    _no_bool_numbers(scenario, {k: v for k, v in data.items() if k != "algorithm"}, where)
    problem = selection_problem(scenario.selection, scenario.mode)
    if problem:
        raise ScenarioError(f"{where}: {problem}")
    if scenario.mode.type not in cls.modes:
        allowed = ", ".join(sorted(cls.modes))
        raise ScenarioError(f"{where}: mode.type: algorithm {name!r} does not run in {scenario.mode.type} mode "
                            f"(allowed: {allowed})")
    if not cls.partial_work:
        pop = scenario.population
        for field, cfg in [("population.completeness", pop.completeness)] + [
                (f"population.clients[{i}].completeness", g.completeness) for i, g in enumerate(pop.clients)]:
            if cfg is not None and cfg.type != "full":
                raise ScenarioError(f"{where}: {field}.type: algorithm {name!r} always runs its full local work "
                                    f"(allowed: full; got {cfg.type!r})")
    problem = cls.mode_problem(scenario.mode) or analysis_problem(cls, scenario.analysis) or \
        links_problem(cls, scenario.upload, scenario.download, scenario.runtime.vectorize) or \
        privacy_problem(cls, params, scenario.privacy, scenario.upload.compression is not None or
                        scenario.download.compression is not None, scenario.runtime.vectorize) or \
        (cls.adapted_problem(params) if scenario.evaluation.adapted is not None else None) or \
        run_privacy_problem(scenario)
    if problem:
        raise ScenarioError(f"{where}: {problem}")
    if scenario.runtime.vectorize > 1:
        problem = vectorize_problem(cls, params, scenario.model.name)
        if problem is None and scenario.runtime.placement == "dedicated":
            problem = "vectorized clients need pooled placement (runtime.placement is dedicated)"
        if problem and not is_vectorizable(cls):
            problem += f" (allowed: {', '.join(n for n in algorithm_names() if is_vectorizable(get_algorithm(n)))})"
        if problem:
            raise ScenarioError(f"{where}: runtime.vectorize: {problem}; 1 turns it off")
    return scenario


class UncheckedParams(BaseModel):
    """A plugin algorithm's fields as given, unchecked (``validate --no-import``)."""

    model_config = ConfigDict(extra="allow", frozen=True)


def _validate_without_imports(data: dict, name: Any, where: str, base_dir: Path | None) -> Scenario:
    """:func:`validate_scenario` importing nothing: shipped algorithms are checked in full;
    a plugin algorithm's own fields are kept as given, unchecked; plugin models and datasets
    are left as names."""
    if not isinstance(name, str):
        raise ScenarioError(f"{where}: algorithm.name: missing or not a string (got {name!r})")
    if name in ALGORITHMS:
        return validate_scenario({**data, "algorithm": {**data["algorithm"]}}, where, base_dir, imports=True) \
            if all(_shipped(data, k, b) for k, b in (("model", MODEL_NAMES), ("dataset", DATASET_NAMES))) \
            else _validate_rest(data, name, where, base_dir)
    return _validate_rest(data, name, where, base_dir)


def _shipped(data: dict, kind: str, builtin: Any) -> bool:
    section = data.get(kind)
    return not isinstance(section, dict) or section.get("name", next(iter(builtin))) in builtin


def _validate_rest(data: dict, name: str, where: str, base_dir: Path | None) -> Scenario:
    """The scenario's sections but the algorithm's own fields (which need its class)."""
    params: BaseModel
    algo = {k: v for k, v in data["algorithm"].items() if k != "name"}
    raw_optimizer = algo.pop("server_optimizer", None)
    if name in ALGORITHMS:
        cls = ALGORITHMS[name]
        try:
            params = cls.Params.model_validate(algo)
        except ValidationError as exc:
            raise ScenarioError(f"{where}: {format_error(exc, cls.Params, ('algorithm',))}") from None
        server_optimizer = _server_optimizer(raw_optimizer, cls, name, where)
    else:
        params = UncheckedParams.model_validate(algo)
        server_optimizer = _server_optimizer(raw_optimizer, object, name, where)
    try:
        config = AlgorithmConfig(name=name, params=params, server_optimizer=server_optimizer)
        scenario = Scenario.model_validate({**data, "algorithm": config},
                                           context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ScenarioError(f"{where}: {format_error(exc, Scenario)}") from None
    _no_bool_numbers(scenario, {k: v for k, v in data.items() if k != "algorithm"}, where)
    return scenario


def _no_bool_numbers(value: Any, raw: Any, where: str, path: tuple = ()) -> None:
    """Refuse ``true``/``false`` given for a number: pydantic reads them as 1 and 0, so
    ``num_clients: true`` would quietly run one client. Walks the validated model beside
    the data it was validated from: a number that came from a bool is the mistake."""
    if isinstance(raw, bool):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ScenarioError(f"{where}: {_dotted(path)}: must be a number (got {str(raw).lower()})")
        return
    if isinstance(value, BaseModel) and isinstance(raw, dict):
        for name, info in type(value).model_fields.items():
            key = info.alias or name
            if key in raw:
                _no_bool_numbers(getattr(value, name), raw[key], where, path + (key,))
    elif isinstance(value, (list, tuple)) and isinstance(raw, list) and len(value) == len(raw):
        for i, (v, r) in enumerate(zip(value, raw)):
            _no_bool_numbers(v, r, where, path + (i,))
    elif isinstance(value, dict) and isinstance(raw, dict):
        for key, v in value.items():
            if key in raw:
                _no_bool_numbers(v, raw[key], where, path + (key,))

def _server_optimizer(raw: object, cls: type, name: str, where: str) -> ServerOptimizerConfig | None:
    """``algorithm.server_optimizer`` validated (None when absent); refused for an algorithm
    whose server moves no global model."""
    if raw is None:
        return None
    if not getattr(cls, "moves_global_model", True):
        raise ScenarioError(f"{where}: algorithm.server_optimizer: algorithm {name!r} moves no global model, so a "
                            "server optimizer has nothing to step; remove it")
    try:
        return ServerOptimizerSection.model_validate({"server_optimizer": raw}).server_optimizer
    except ValidationError as exc:
        raise ScenarioError(f"{where}: {format_error(exc, ServerOptimizerSection, ('algorithm',))}") from None


def _resolve_named(data: dict, base_dir: Path | None) -> dict:
    """``model.name`` and ``dataset.name``: a user's model or dataset is resolved now (so a
    bad reference is reported by ``fedclock validate``); an object given in place of a name
    (Python API) becomes its ``module:attribute`` reference."""
    for kind, builtin in (("model", MODEL_NAMES), ("dataset", DATASET_NAMES)):
        section = data.get(kind)
        if not isinstance(section, dict) or "name" not in section:
            continue
        name = section["name"]
        if isinstance(name, str):
            if name in builtin:
                continue
            plugin = find(kind, name, base_dir, builtin)
        else:
            plugin = from_object(kind, name)
        if kind == "dataset":
            check_loader(plugin.name, plugin.obj)
        data = {**data, kind: {**section, "name": plugin.name}}
    return data


_SCALAR_MISMATCH = {"float_type", "float_parsing", "int_type", "int_parsing", "int_from_float", "bool_type",
                    "bool_parsing", "string_type", "model_attributes_type", "model_type", "dict_type", "list_type",
                    "finite_number", "literal_error"}


def _pick_error(exc: ValidationError, model: type[BaseModel]) -> ErrorDetails:
    """The error to report: the first one, unless the same field failed in several union
    branches; then the branch that got furthest (a mistake inside a ``{dist: ...}`` mapping
    beats "Input should be a valid number" from the plain-number branch)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    field, _ = _clean_loc(model, tuple(first["loc"]))
    same = [e for e in errors if _clean_loc(model, tuple(e["loc"]))[0][:len(field)] == field]
    return max(same, key=lambda e: (e["type"] not in _SCALAR_MISMATCH, len(e["loc"])))


def format_error(exc: ValidationError, model: type[BaseModel], prefix: tuple[str, ...] = ()) -> str:
    """The most telling error of a validation failure as one line: field path, problem, value."""
    err = _pick_error(exc, model)
    kind = err["type"]
    raw_loc = tuple(err["loc"])
    if kind == "extra_forbidden":
        loc, allowed = _clean_loc(model, raw_loc[:-1])
        loc += raw_loc[-1:]
    else:
        loc, allowed = _clean_loc(model, raw_loc)
    path = _dotted(prefix + loc)
    msg = one_line(str(err["msg"]))
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        text = f"unknown field (allowed: {', '.join(allowed)})" if allowed else "unknown field"
        return f"{path}: {text}"
    if kind == "missing":
        return f"{path}: required field is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        key = str(ctx.get("discriminator", "type")).strip("'\"")
        where = f"{path}.{key}" if path else key
        tags = ", ".join(_tags_at(model, loc)) or str(ctx.get("expected_tags", ""))
        if kind == "union_tag_not_found":
            return f"{where}: required field is missing (allowed: {tags})"
        return f"{where}: unknown value {one_line(str(ctx.get('tag')))!r} (allowed: {tags})"
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        if _RELATIVE_FIELD.match(msg):  # validators start with the field path relative to their model
            return f"{path}.{msg}" if path else msg
        return f"{path}: {msg}" if path else msg
    value = err.get("input")
    if isinstance(value, (dict, list)):
        got = f" (got a {'mapping' if isinstance(value, dict) else 'list'})"
    else:
        got = f" (got {_short(value)})"
    return f"{path}: {msg}{got}" if path else f"{msg}{got}"


_LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with every character that could start a new line escaped (``\\n``, ``\\x1e``...)."""
    return _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _tags_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The discriminator values allowed for the field at ``loc`` (a cleaned location)."""
    candidates: list[type[BaseModel]] = [model]
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            continue
        owner = next((m for m in candidates if part in m.model_fields), None)
        if owner is None:
            return []
        annotation = owner.model_fields[part].annotation
        candidates = _model_classes(annotation)
    return [t for t in (_tag_of(m) for m in candidates) if t is not None]


def _check_keys(data: Any, where: str, path: tuple = ()) -> None:
    """Every mapping key must be text: YAML reads ``1:`` or ``true:`` as a number or a bool."""
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                raise ScenarioError(f"{where}: {_dotted(path + (repr(key),))}: unknown field (keys are field names, "
                                    f"got the {type(key).__name__} {_short(key)})")
            _check_keys(value, where, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_keys(value, where, path + (i,))


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part)
            if not text or _LINE_BREAKS.search(text) or text != text.strip():
                text = repr(text)
            out += ("." if out else "") + text
    return out


def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic model classes an annotation may hold (through Optional/Union/list/Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_classes(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple):
        return [m for a in typing.get_args(annotation) for m in _model_classes(a)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _clean_loc(model: type[BaseModel], loc: tuple) -> tuple[tuple, list[str]]:
    """Drop union-branch labels from a pydantic error location and return the fields that
    the innermost model allows."""
    out: list = []
    candidates: list[type[BaseModel]] = [model]
    for part in loc:
        if isinstance(part, int):
            out.append(part)
            continue
        owner = next((m for m in candidates if part in m.model_fields), None)
        if owner is not None:
            out.append(part)
            candidates = _model_classes(owner.model_fields[part].annotation)
            continue
        branch = [m for m in candidates if _tag_of(m) == part]
        if branch:
            candidates = branch
        # anything else is a union-branch label such as 'float' or 'function-after[...]'
    allowed = sorted({f for m in candidates for f in m.model_fields}) if candidates else []
    return tuple(out), allowed


def _tag_of(model: type[BaseModel]) -> str | None:
    for key in DISCRIMINATORS:
        field = model.model_fields.get(key)
        if field is not None:
            args = typing.get_args(field.annotation)
            if len(args) == 1 and isinstance(args[0], str):
                return args[0]
    return None
