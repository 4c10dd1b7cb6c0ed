"""Property-based bad input: thousands of malformed scenario files through ``fedclock validate``.

Every generated file is wrong in a known way (a wrong type, a value out of range, an unknown
key, conflicting settings, truncated YAML, a huge number, unicode where it does not belong).
Each must give exit status 2 and exactly one line on stderr, ``fedclock: error: ...``, that
names the field (or, for broken YAML, the file), and never a traceback. The fields and their
constraints are read from the pydantic models themselves, so fields added later are fuzzed
too. Six properties run 200 examples each (1,200 files) plus fixed special files; the examples
are derandomized so CI is stable. To explore, set ``FEDCLOCK_FUZZ_SEED`` (random examples) and
``FEDCLOCK_FUZZ_EXAMPLES`` (examples per property).
"""
from __future__ import annotations

import copy
import math
import os
import tempfile
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import annotated_types as at
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from fedclock.scenarios.loader import parse_suite
from tests.scenarios.one_line import assert_one_line, run_cli

_SEED = os.environ.get("FEDCLOCK_FUZZ_SEED")
FUZZ = settings(max_examples=int(os.environ.get("FEDCLOCK_FUZZ_EXAMPLES", "200")), deadline=None,
                derandomize=_SEED is None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

SYNC: dict[str, Any] = {
    "name": "fuzz", "description": "a valid base scenario", "seed": 7,
    "dataset": {"name": "digits", "image_size": 8, "max_train_samples": 500, "global_test_fraction": 0.2,
                "client_test_fraction": 0.25,
                "partition": {"type": "dirichlet_by_class", "alpha": 0.5, "min_samples": 4}},
    "model": {"name": "mlp", "hidden": [16, 8]},
    "population": {
        "num_clients": 6,
        "devices": {"compute": {"dist": "loguniform", "low": 20, "high": 200},
                    "down_mbps": {"dist": "choice", "values": [5.0, 20.0], "weights": [1.0, 3.0]},
                    "up_mbps": {"dist": "lognormal", "median": 2.0, "sigma": 0.5},
                    "latency_s": 0.05},
        "availability": {"type": "markov", "mean_up_s": 30.0, "mean_down_s": 10.0, "start": "up"},
        "clients": [{"ids": [0, 1], "compute": 500.0, "availability": {"type": "periodic_missing", "period": 2}}],
    },
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 16, "local_epochs": 1.0, "momentum": 0.5,
                  "max_grad_norm": 5.0},
    "mode": {"type": "sync", "cohort_size": 4, "deadline_s": 3.0, "late_results": "include"},
    "stop": {"rounds": 5, "virtual_time_s": 100.0, "target_accuracy": 0.9},
    "evaluation": {"every": 2, "personalized": True, "batch_size": 256},
    "runtime": {"backend": "inline", "num_actors": 2, "placement": "pooled", "num_cpus": 1.0, "num_gpus": 0.0,
                "threads_per_actor": 1, "device": "cpu"},
    "output": {"dir": "results/fuzz", "flush_every_s": 1.0, "progress": False},
    "privacy": {"mode": "central", "clip": 0.5, "noise_multiplier": 1.0,
                "adaptive": {"target_quantile": 0.5, "learning_rate": 0.2, "bit_noise": 2.0},
                "budget": {"epsilon": 8.0, "delta": 1e-5, "clients": [{"ids": [2, 3], "epsilon": 6.0}]}},
}
ASYNC: dict[str, Any] = copy.deepcopy(SYNC) | {
    "algorithm": {"name": "fedasync", "lr": 0.05, "batch_size": 8, "alpha": 0.6, "staleness_fn": "hinge",
                  "a": 0.5, "b": 4.0, "rho": 0.01},
    "mode": {"type": "async", "concurrency": 3},
    "stop": {"versions": 20},
}
del ASYNC["privacy"]  # fedasync uploads its model, not a delta
ASYNC["dataset"] = {"name": "synthetic", "synthetic_alpha": 0.5, "synthetic_beta": 0.5, "synthetic_features": 10,
                    "synthetic_classes": 3, "synthetic_samples": 300, "partition": {"type": "natural"}}
ASYNC["population"]["devices"] = {"compute": {"dist": "uniform", "low": 10, "high": 20}, "down_mbps": 10.0,
                                  "up_mbps": {"dist": "constant", "value": 1.0},
                                  "latency_s": {"dist": "uniform", "low": 0.01, "high": 0.1}}
SUITE: dict[str, Any] = copy.deepcopy(SYNC) | {"runs": [
    {"name": "plain"}, {"name": "buffered", "algorithm": {"name": "fedbuff", "buffer_size": 2},
                        "mode": {"type": "async", "concurrency": 2}, "stop": {"versions": 10}}]}
SUITE["stop"] = {"virtual_time_s": 100.0}
BASES = {"sync": SYNC, "async": ASYNC, "suite": SUITE}


def test_bases_are_valid() -> None:
    for name, base in BASES.items():
        assert parse_suite(copy.deepcopy(base), name).runs


# --------------------------------------------------------------------------- running the CLI
_DIR = Path(tempfile.mkdtemp(prefix="fedclock-fuzz-"))
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass
class Outcome:
    code: int
    err: str
    path: Path

    @property
    def message(self) -> str:
        return self.err.removeprefix("fedclock: error: ").rstrip("\n")


def validate_text(text: str | bytes, overrides: tuple[str, ...] = ()) -> Outcome:
    """Write a scenario file and run ``fedclock validate`` on it in-process."""
    path = _DIR / "scenario.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    code, err = run_cli(["validate", str(path), *[f"--set={o}" for o in overrides]])
    return Outcome(code, err, path)


def validate_data(data: Any) -> Outcome:
    return validate_text(yaml.dump(data, Dumper=_DUMPER, allow_unicode=True, sort_keys=False))


def assert_one_line_error(outcome: Outcome, *names: str) -> None:
    """The outcome is a one-line error naming ``names`` (:func:`tests.scenarios.one_line.assert_one_line`)."""
    assert_one_line(outcome.code, outcome.err, *names)


# --------------------------------------------------------------------------- the fields, from the models
@dataclass(frozen=True)
class Leaf:
    """A scalar (or list-of-scalars) field of a base scenario, where it sits in the file."""

    path: tuple[str | int, ...]
    annotation: Any
    metadata: tuple[Any, ...]

    @property
    def dotted(self) -> str:
        out = ""
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
        return out


def _leaves(model: BaseModel, path: tuple[str | int, ...], raw: Any) -> Iterator[Leaf]:
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if name == "algorithm" and not path:  # params live beside the name in the file
            yield from _leaves(value.params, ("algorithm",), raw.get("algorithm", {}))
            continue
        here = path + (name,)
        sub_raw = raw.get(name) if isinstance(raw, dict) else None
        if isinstance(value, BaseModel):
            if sub_raw is not None:
                yield from _leaves(value, here, sub_raw)
            continue
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            for i, item in enumerate(value):
                if isinstance(sub_raw, list) and i < len(sub_raw):
                    yield from _leaves(item, here + (i,), sub_raw[i])
            continue
        yield Leaf(here, info.annotation, tuple(info.metadata))


def leaves_of(base: dict[str, Any]) -> list[Leaf]:
    scenario = parse_suite(copy.deepcopy(base), "base").runs[0]
    return list(_leaves(scenario, (), base))


LEAVES = {name: leaves_of(base) for name, base in (("sync", SYNC), ("async", ASYNC))}


def _flatten(annotation: Any) -> tuple[list[Any], list[Any]]:
    """Base types and constraint metadata inside Optional/Union/Annotated."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        args = typing.get_args(annotation)
        types_, meta = _flatten(args[0])
        return types_, meta + [m for a in args[1:] for m in (getattr(a, "metadata", None) or [a])]
    if origin in (typing.Union, types.UnionType):
        types_, meta = [], []
        for a in typing.get_args(annotation):
            t, m = _flatten(a)
            types_ += t
            meta += m
        return types_, meta
    return [annotation], []


def bad_values(leaf: Leaf) -> list[tuple[str, Any]]:
    """(kind, value) pairs that the field must reject."""
    kinds, meta = _flatten(leaf.annotation)
    meta = list(leaf.metadata) + meta
    kinds = [k for k in kinds if k is not type(None)]
    models = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
    scalars = [k for k in kinds if k not in models]
    out: list[tuple[str, Any]] = [("mapping", {"oops": 1})]
    is_list = any(typing.get_origin(k) is list for k in scalars)
    if is_list:
        item_types, item_meta = _flatten(typing.get_args(scalars[0])[0])
        if str not in item_types:  # a list of strings is what a list of tags (say) wants
            out += [("list of strings", ["x", "y"])]
        out += [("string", "abc"), ("list of lists", [[1], [2]])]
        meta = item_meta
        scalars = item_types
        if int in scalars:
            out += [("list with a fraction", [1.5])]
        out += _range_values(meta, int in scalars, wrap=True)
        return out
    out.append(("list", [1, 2]))
    literal = [k for k in scalars if typing.get_origin(k) is typing.Literal]
    if literal:
        allowed = {a for k in literal for a in typing.get_args(k)}
        out += [("unknown choice", v) for v in ("nope", "ünïcödé", "sync ", "🙂", "") if v not in allowed]
        out.append(("number for a choice", 5))
        return out
    if bool in scalars:
        out += [("string for a bool", "maybe"), ("number for a bool", 7), ("fraction for a bool", 0.5)]
        return out
    if int in scalars or float in scalars:
        out += [("string for a number", "abc"), ("unicode for a number", "ⅻ"), ("numeric text", "12abc"),
                ("infinity", math.inf), ("nan", math.nan), ("-infinity", -math.inf)]
        if float not in scalars:
            out += [("fraction for an int", 2.5), ("huge float for an int", 1e300)]
        out += _range_values(meta, float not in scalars)
        return out
    if str in scalars:
        pattern = [m for m in meta if getattr(m, "pattern", None)]
        min_length = [m for m in meta if getattr(m, "min_length", None)]
        if pattern:
            out += [("unicode name", "naïve name"), ("space in name", "a b"), ("emoji", "🙂"), ("slash", "a/b")]
        if min_length:
            out += [("empty string", "")]
        out += [("number for a string", 12)] if pattern else []
        return out
    return out  # Path and other types: only the mapping and list


def _range_values(meta: list[Any], integer: bool, wrap: bool = False) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for m in meta:
        for kind, attr, delta in (("below minimum", "ge", -1), ("at exclusive minimum", "gt", 0),
                                  ("above maximum", "le", 1), ("at exclusive maximum", "lt", 0)):
            bound = getattr(m, attr, None) if isinstance(m, (at.Ge, at.Gt, at.Le, at.Lt)) else None
            if bound is None:
                continue
            if integer:
                value: Any = int(bound) + delta
                if attr in ("le", "lt"):
                    out.append(("huge int", 10 ** 40))
            else:
                value = bound + (0.5 * delta if delta else 0.0) if abs(bound) < 1e6 else bound * 2
            out.append((kind, [value] if wrap else value))
    return out


CASES = {name: [(leaf, kind, value) for leaf in leaves for kind, value in bad_values(leaf)]
         for name, leaves in LEAVES.items()}


def test_every_section_is_fuzzed() -> None:
    dotted = {leaf.dotted for leaves in LEAVES.values() for leaf in leaves}
    for expected in ("seed", "name", "dataset.partition.alpha", "population.devices.compute.low",
                     "population.devices.down_mbps.weights", "population.availability.mean_up_s",
                     "population.clients[0].compute", "population.clients[0].ids", "algorithm.lr",
                     "algorithm.staleness_fn", "mode.cohort_size", "mode.concurrency", "stop.target_accuracy",
                     "evaluation.every", "runtime.placement", "output.flush_every_s", "dataset.synthetic_alpha"):
        assert expected in dotted, expected
    assert sum(len(c) for c in CASES.values()) > 300


def set_at(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


# --------------------------------------------------------------------------- wrong types, ranges, huge numbers
@FUZZ
@given(st.sampled_from(sorted(CASES)).flatmap(lambda b: st.tuples(st.just(b), st.sampled_from(CASES[b]))),
       st.booleans())
def test_bad_field_value(case: tuple[str, tuple[Leaf, str, Any]], in_run: bool) -> None:
    base_name, (leaf, _kind, value) = case
    data = copy.deepcopy(BASES[base_name])
    if in_run and base_name == "sync" and leaf.path[0] not in ("name",) and not isinstance(leaf.path[-1], int) \
            and all(isinstance(p, str) for p in leaf.path):
        # the same mistake made inside a run of a suite: the run's section merges over the base
        run: dict[str, Any] = {"name": "r1"}
        node = run
        for part in leaf.path[:-1]:
            node = node.setdefault(part, {})
        if leaf.path[0] == "algorithm":
            run["algorithm"]["name"] = data["algorithm"]["name"]
        if len(leaf.path) > 1 and leaf.path[-2] in ("partition", "availability", "mode", "compute", "down_mbps",
                                                     "up_mbps", "latency_s"):
            src: Any = data
            for part in leaf.path[:-1]:
                src = src[part]
            node.update({k: v for k, v in src.items() if k in ("type", "dist")})
        node[leaf.path[-1]] = value
        data["runs"] = [run]
    else:
        set_at(data, leaf.path, value)
    outcome = validate_data(data)
    assert_one_line_error(outcome, leaf.dotted)


# --------------------------------------------------------------------------- unknown keys
def _sections(data: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(data, dict):
        yield path
        for k, v in data.items():
            yield from _sections(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _sections(v, path + (i,))


KNOWN_KEYS = {"runs"} | {f for leaves in LEAVES.values() for leaf in leaves for f in leaf.path if isinstance(f, str)} \
    | {k for base in BASES.values() for p in _sections(base) for k in p if isinstance(k, str)}
SECTIONS = {name: [p for p in _sections(BASES[name]) if "runs" not in p] for name in ("sync", "async")}

keys = st.one_of(
    st.text(min_size=1, max_size=12).filter(lambda k: k not in KNOWN_KEYS and k.strip() == k and k != "<<"),
    st.integers(-5, 10 ** 20), st.sampled_from(["lr ", "Seed", "num-clients", "naïve", "clïents", "🙂", "a\nb",
                                                "x\u2028y", "tab\there", "quote'\""]))


@FUZZ
@given(st.sampled_from(sorted(SECTIONS)).flatmap(lambda b: st.tuples(st.just(b), st.sampled_from(SECTIONS[b]))),
       keys, st.one_of(st.integers(), st.text(max_size=5), st.none(), st.just({"a": 1})))
def test_unknown_key(where: tuple[str, tuple[str | int, ...]], key: Any, value: Any) -> None:
    base_name, section = where
    data = copy.deepcopy(BASES[base_name])
    node: Any = data
    for part in section:
        node = node[part]
    node[key] = value
    outcome = validate_data(data)
    field = ".".join(str(p) for p in section if isinstance(p, str))
    names = ["unknown field"] + ([field.split(".")[-1]] if field else [])
    assert_one_line_error(outcome, *names)


# --------------------------------------------------------------------------- conflicting settings
def _conflicts() -> list[tuple[str, Any, str]]:
    """(description, function editing a copy of SYNC, the field the error must name)."""
    def edit(**changes: Any) -> Any:
        def apply(data: dict[str, Any]) -> None:
            for dotted, value in changes.items():
                set_at(data, tuple(int(p) if p.isdigit() else p for p in dotted.split("__")), value)
        return apply
    return [
        ("rounds in async mode", edit(mode={"type": "async", "concurrency": 2},
                                      algorithm={"name": "fedasync"}), "stop.rounds"),
        ("cohort size and fraction", edit(mode={"type": "sync", "cohort_size": 2, "cohort_fraction": 0.5}),
         "cohort_size"),
        ("late results without deadline", edit(mode={"type": "sync", "late_results": "include"}), "late_results"),
        ("natural partition of digits", edit(dataset__partition={"type": "natural"}), "partition.type"),
        ("cohort larger than population", edit(mode={"type": "sync", "cohort_size": 7}), "mode.cohort_size"),
        ("concurrency larger than population", edit(mode={"type": "async", "concurrency": 7},
                                                    algorithm={"name": "fedbuff"}, stop={"versions": 3}),
         "mode.concurrency"),
        ("dedicated with too few actors", edit(runtime={"placement": "dedicated", "num_actors": 2}),
         "runtime.num_actors"),
        ("async algorithm in sync mode", edit(algorithm={"name": "fedasync"}), "mode.type"),
        ("sync algorithm in async mode", edit(mode={"type": "async"}, stop={"versions": 3}), "mode.type"),
        ("uniform high below low", edit(population__devices__compute={"dist": "uniform", "low": 5, "high": 1}),
         "population.devices.compute.high"),
        ("choice weights mismatch", edit(population__devices__down_mbps={"dist": "choice", "values": [1.0],
                                                                          "weights": [1.0, 2.0]}),
         "population.devices.down_mbps.weights"),
        ("choice weights all zero", edit(population__devices__down_mbps={"dist": "choice", "values": [1.0, 2.0],
                                                                         "weights": [0.0, 0.0]}),
         "population.devices.down_mbps.weights"),
        ("client id out of range", edit(population__clients=[{"ids": [6]}]), "population.clients[0].ids"),
        ("no stop bound", edit(stop={"target_accuracy": 0.5}), "stop"),
        ("no stop section", lambda d: d.pop("stop"), "stop"),
        ("no algorithm", lambda d: d.pop("algorithm"), "algorithm"),
        ("algorithm not a mapping", edit(algorithm="fedavg"), "algorithm"),
        ("algorithm without name", edit(algorithm={"lr": 0.1}), "algorithm.name"),
        ("unknown algorithm", edit(algorithm={"name": "fedsgd2"}), "algorithm.name"),
        ("unknown mode type", edit(mode={"type": "semi-sync"}), "mode"),
        ("unknown partition type", edit(dataset__partition={"type": "stripes"}), "dataset.partition"),
        ("unknown distribution", edit(population__devices__compute={"dist": "pareto", "low": 1}),
         "population.devices.compute"),
        ("images resized for vector data", edit(dataset={"name": "synthetic", "image_size": 8}),
         "dataset.image_size"),
        ("runs not a list", edit(runs={"a": 1}), "runs"),
        ("runs empty", edit(runs=[]), "runs"),
        ("run without a name", edit(runs=[{"seed": 1}]), "runs[0]"),
        ("duplicate run names", edit(runs=[{"name": "a"}, {"name": "a"}]), "runs"),
    ]


CONFLICTS = _conflicts()


@FUZZ
@given(st.sampled_from(CONFLICTS), st.integers(0, 2 ** 31), st.sampled_from([None, "naïve run", "r-1"]))
def test_conflicting_settings(conflict: tuple[str, Any, str], seed: int, description: str | None) -> None:
    _, apply, field = conflict
    data = copy.deepcopy(SYNC)
    data["seed"] = seed
    if description is not None:
        data["description"] = description
    apply(data)
    assert_one_line_error(validate_data(data), field)


# --------------------------------------------------------------------------- broken YAML
FLOW = {name: yaml.safe_dump(base, default_flow_style=True, width=10 ** 6, allow_unicode=True).strip()
        for name, base in BASES.items()}


@FUZZ
@given(st.sampled_from(sorted(FLOW)), st.floats(0.0, 1.0, exclude_max=True))
def test_truncated_flow_yaml(base: str, where: float) -> None:
    text = FLOW[base]
    cut = 1 + int(where * (len(text) - 2))  # a strict, non-empty prefix: the outer mapping is never closed
    outcome = validate_text(text[:cut])
    assert_one_line_error(outcome, str(outcome.path), "invalid YAML")


BLOCK = {name: yaml.safe_dump(base, sort_keys=False, allow_unicode=True) for name, base in BASES.items()}


@FUZZ
@given(st.sampled_from(sorted(BLOCK)), st.floats(0.0, 1.0, exclude_max=True),
       st.sampled_from(["", "\t", "  : :", "{", "- [", "'", "\x00", "\ufeff", "é", "&a *b", "!!binary x"]))
def test_truncated_block_yaml_never_crashes(base: str, where: float, tail: str) -> None:
    text = BLOCK[base]
    cut = int(where * len(text))
    outcome = validate_text(text[:cut] + tail)
    if outcome.code == 0:  # a cut at a line end may leave a complete, valid file
        assert outcome.err == ""
    else:
        assert_one_line_error(outcome)


@pytest.mark.parametrize("text, names", [
    ("!!python/object/apply:os.system ['echo hi']\n", ["invalid YAML", "python/object"]),
    ("name: x\nalgorithm: !!python/name:os.system {}\n", ["invalid YAML"]),
    ("a: &x [1]\nb: *y\n", ["invalid YAML"]),
    ("name: a\nname: b\n", ["duplicate key 'name'"]),
    ("- just\n- a list\n", ["must be a mapping"]),
    ("", ["empty file"]),
    ("42\n", ["must be a mapping"]),
    (b"name: \xff\xfe\n", ["cannot read file"]),
    ("name: x\n\tstop: {rounds: 1}\n", ["invalid YAML"]),
    ("? [a, b]\n: 1\n", ["invalid YAML"]),
    ("{name: x, algorithm: {name: fedavg}, stop: {rounds: 1}, seed: 99999999999999999999999999}\n", ["seed"]),
    ("{name: x, algorithm: {name: fedavg, lr: 1.0e+400}, stop: {rounds: 1}}\n", ["algorithm.lr"]),
    ("{name: x, algorithm: {name: fedavg, lr: .nan}, stop: {rounds: 1}}\n", ["algorithm.lr"]),
    ("{name: x, algorithm: {name: fedavg}, stop: {rounds: 1}, population: {num_clients: 100000000000}}\n",
     ["population.num_clients"]),
    ("{name: \"na\u00efve\u2028name\", algorithm: {name: fedavg}, stop: {rounds: 1}}\n", ["name"]),
], ids=lambda v: repr(v)[:30])
def test_special_files(text: str | bytes, names: list[str]) -> None:
    outcome = validate_text(text)
    assert_one_line_error(outcome, *names)


# --------------------------------------------------------------------------- --set overrides
@FUZZ
@given(st.lists(st.one_of(
    st.text(max_size=30),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
        ["seed", "algorithm.lr", "mode.type", "population.clients.0.ids", "population.clients.9", "runs.x.seed",
         "runs", "a..b", "stop", "stop.rounds.x", "model.hidden.0", "dataset.partition", "", "runs.plain"]),
        st.text(max_size=12))), min_size=1, max_size=3), st.sampled_from(["sync", "suite"]))
def test_overrides_never_crash(overrides: list[str], base: str) -> None:
    outcome = validate_text(BLOCK[base], tuple(overrides))
    if outcome.code != 0:
        assert_one_line_error(outcome)


# --------------------------------------------------------------------------- YAML aliases
def _alias_bomb(depth: int, breadth: int, where: str) -> str:
    """A "billion laughs" file: ``a{i}`` is a list of ``breadth`` aliases of ``a{i-1}``, so the
    last one stands for ``breadth ** depth`` values in a file of a few hundred bytes."""
    anchors = ["  a0: &a0 [lol, lol]"] + [
        f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * breadth)}]" for i in range(1, depth + 1)]
    last = f"*a{depth}"
    body = BLOCK["sync"]
    if where == "algorithm":
        body = body.replace("algorithm:\n", f"algorithm:\n  extra: {last}\n", 1)
    elif where == "runs":
        body += f"runs:\n- name: bomb\n  timeline: {last}\n"
    elif where == "description":
        body = body.replace("description: a valid base scenario", f"description: {last}", 1)
    return "anchors:\n" + "\n".join(anchors) + "\n" + body


@settings(FUZZ, max_examples=min(FUZZ.max_examples, 20))
@given(st.integers(6, 10), st.integers(6, 9), st.sampled_from(["top", "algorithm", "runs", "description"]))
def test_an_alias_bomb_is_a_quick_one_line_error(depth: int, breadth: int, where: str) -> None:
    """Nested aliases (9 ** 9 values in 400 bytes) are refused before anything walks them: a
    one-line error in well under a second (without the bound, depth 8 took over 90 s)."""
    import time

    started = time.perf_counter()
    outcome = validate_text(_alias_bomb(depth, breadth, where))
    assert time.perf_counter() - started < 1.0
    assert_one_line_error(outcome, str(outcome.path), "aliases")


@pytest.mark.parametrize("text, names", [
    ("a: &a [*a]\n", ["refers to itself"]),
    ("a: &a {b: *a}\n", ["refers to itself"]),
], ids=["list", "mapping"])
def test_a_self_referring_alias_is_a_one_line_error(text: str, names: list[str]) -> None:
    outcome = validate_text(text)
    assert_one_line_error(outcome, *names)


def test_deep_nesting_is_a_one_line_error() -> None:
    """Lists nested deeper than fedclock's limit (100) but shallower than any YAML parser's
    (PyYAML's own check, from 6.0.4, stops near 1,000 levels) reach fedclock's check, which
    names the limit."""
    outcome = validate_text("a: " + "[" * 150 + "]" * 150 + "\n")
    assert_one_line_error(outcome, str(outcome.path), "nested more than 100 levels")


def test_nesting_past_the_parser_limit_is_a_one_line_error() -> None:
    """3,000 nested lists used to overflow Python's recursion limit (a traceback). Which check
    stops them depends on the installed PyYAML (its parser's own nesting limit from 6.0.4,
    fedclock's before): either way the user gets one line naming the file, exit 2; the
    wording is the dependency's and is not pinned."""
    outcome = validate_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    assert_one_line_error(outcome, str(outcome.path))


def test_plain_aliases_still_work() -> None:
    """Aliases that share a section (a normal use) load as if the section were written out."""
    text = BLOCK["suite"].replace("population:\n", "population: &pop\n", 1) + "x-shared: *pop\n"
    outcome = validate_text(text)
    assert_one_line_error(outcome, "x-shared", "unknown field")  # reaches validation: the aliases were fine
    shared = BLOCK["sync"].replace("devices:\n", "devices: &dev\n", 1)
    assert validate_text(shared + "runs:\n- name: a\n- name: b\n  population: {devices: *dev}\n").code == 0


# --------------------------------------------------------------------------- file-system faults
_FS_RUN = ("name: fs\nseed: 5\ndataset: {name: digits}\nmodel: {name: mlp, hidden: [8]}\n"
           "population: {num_clients: 4}\nalgorithm: {name: fedasync, lr: 0.1, local_epochs: 1, batch_size: 16}\n"
           "mode: {type: async, concurrency: 2}\nstop: {versions: 8}\nevaluation: {every: 2, personalized: false}\n"
           "runtime: {backend: inline}\noutput: {flush_every_s: 0.01, progress: false, checkpoint_every: 2}\n")


@settings(FUZZ, max_examples=min(FUZZ.max_examples, 4))
@given(st.integers(1, 25), st.sampled_from(["ENOSPC", "EROFS", "EACCES", "EDQUOT"]),
       st.sampled_from(["pyarrow.parquet.write_table", "os.replace", "torch.save"]))
def test_a_filesystem_fault_is_one_line_and_damages_nothing(nth: int, code: str, call: str) -> None:
    """The ``nth`` call of one file-writing function fails as a full, read-only or forbidden
    disk makes it fail: ``fedclock run`` prints one line naming what it could not write and
    the way back, and every results file already on disk still reads."""
    import errno
    import importlib
    import shutil

    import pyarrow.parquet as pq

    owner_name, _, attr = call.rpartition(".")
    owner = importlib.import_module(owner_name)
    original, calls = getattr(owner, attr), [0]

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == nth:
            number = getattr(errno, code)
            raise OSError(number, os.strerror(number), str(args[-1] if call == "torch.save" else args[0]))
        return original(*args, **kwargs)

    path, out = _DIR / "fs.yaml", _DIR / "fs-out"
    path.write_text(_FS_RUN)
    shutil.rmtree(out, ignore_errors=True)
    setattr(owner, attr, failing)
    try:
        status, text = run_cli(["run", str(path), "--out", str(out), "--quiet"])
    finally:
        setattr(owner, attr, original)
    if calls[0] < nth:  # the run made fewer such calls: it finished
        assert status == 0, text
        return
    assert_one_line(status, text, status=1, prefix="fedclock: error: cannot write ")
    assert f"--resume {out}" in text or "--overwrite" in text
    for table in out.glob("*.parquet"):
        pq.read_table(table)
