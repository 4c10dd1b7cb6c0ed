"""A researcher's own algorithm, model, dataset, selector, availability model, device distribution or
partition, named in a scenario file.

Three ways to name one, tried in this order (``kind`` is ``algorithm``, ``model``,
``dataset`` or ``selection``; the field is ``<kind>.name``; the tag of an availability model,
a device distribution or a partition takes the second way only, see :func:`variant_class`):

1. a shipped name (``fedavg``, ``mlp``, ``digits``): resolved by the caller, not here;
2. ``module:attribute`` (the convention of entry points): the module is looked for beside
   the scenario file first (``my_algos.py`` or a package folder ``my_algos/``), then on the
   Python path; ``attribute`` may be dotted (``Outer.Inner``);
3. a name an installed package registers in the entry-point group ``fedclock.algorithms``,
   ``fedclock.models``, ``fedclock.datasets`` or ``fedclock.selectors`` (``[options.entry_points]`` of its
   ``setup.cfg``, or ``[project.entry-points."fedclock.algorithms"]`` in ``pyproject.toml``).

A wrong reference is the user's mistake: :class:`PluginError`, one line naming the field
(module missing, attribute missing, not an :class:`~fedclock.algorithms.base.Algorithm`,
not callable). An exception raised while the user's module runs is their bug and propagates
with their traceback.

Modules found beside a scenario file are imported under their own name (so the classes in
them pickle by reference) and travel to Ray workers with the job: :func:`modules_to_ship`
lists their files for Ray's ``runtime_env`` ``py_modules`` (:mod:`fedclock.actors.runtime`).
Installed packages (entry points, or references into site-packages) are expected to be
installed wherever the clients run, like any other dependency.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

from fedclock.algorithms.base import Algorithm
from fedclock.algorithms.models import MODEL_NAMES
from fedclock.algorithms.registry import ALGORITHMS, algorithm_names
from fedclock.scheduling.selection import Selector

KINDS = ("algorithm", "model", "dataset", "selection")
GROUPS = {"algorithm": "fedclock.algorithms", "model": "fedclock.models", "dataset": "fedclock.datasets",
          "selection": "fedclock.selectors"}
"""Entry-point group of each kind."""

_REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class PluginError(Exception):
    """A reference that does not name a usable object; the message is one line starting
    with the field (``algorithm.name: ...``)."""


@dataclass(frozen=True)
class Plugin:
    """A resolved name: the object, where it came from, and the file to ship to workers."""

    kind: str
    name: str
    obj: Any
    origin: str
    """``module /path/file.py`` or ``entry point of DIST VERSION`` or ``object``."""
    ship: str | None = None
    """Path of the top-level module (file or package folder) that Ray workers need, or None."""


def is_reference(name: str) -> bool:
    """True when ``name`` has the ``module:attribute`` form."""
    return ":" in name


def entry_points(kind: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The names installed packages register for ``kind``, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUPS[kind])}


def entry_point_origin(ep: importlib.metadata.EntryPoint) -> str:
    """Which installed distribution registers ``ep``."""
    dist = ep.dist
    return f"entry point of {dist.name} {dist.version}" if dist is not None else "entry point"


def find(kind: str, name: str, base_dir: Path | None = None, builtin: Sequence[str] = ()) -> Plugin:
    """Resolve a non-shipped ``name`` of ``kind`` (a reference or an entry-point name) and
    check it is usable as one; ``builtin`` lists the shipped names for the error message."""
    field = f"{kind}.name"
    if is_reference(name):
        plugin = _from_reference(kind, name, base_dir)
    else:
        eps = entry_points(kind)
        if name not in eps:
            allowed = ", ".join(sorted(builtin) + sorted(eps))
            raise PluginError(f"{field}: unknown {kind} {name!r} (allowed: {allowed}; or module:attribute for "
                              f"your own, e.g. my_{kind}s:{'MyAlgorithm' if kind == 'algorithm' else 'build'})")
        ep = eps[name]
        try:
            obj = ep.load()
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"{field}: entry point {name!r} ({ep.value}) cannot be loaded: "
                              f"{exc.__class__.__name__}: {exc}") from None
        check(kind, f"entry point {name!r} ({ep.value})", obj)
        return Plugin(kind, name, obj, entry_point_origin(ep))
    check(kind, plugin.name, plugin.obj)
    return plugin


def from_object(kind: str, obj: Any) -> Plugin:
    """A plugin given as the object itself (Python API). It must be reachable by its
    ``module:qualname`` reference, so that every process (Ray workers included) finds it."""
    field = f"{kind}.name"
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        raise PluginError(f"{field}: pass a class or function defined at the top level of a module "
                          f"(got {obj!r})")
    check(kind, f"{module}:{qualname}", obj)
    reference = f"{module}:{qualname}"
    try:
        found = functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
    except (ImportError, AttributeError):
        found = None
    if found is not obj:
        raise PluginError(f"{field}: {reference} does not name the object passed (define it at the top level of a "
                          f"module)")
    return Plugin(kind, reference, obj, "object", _ship_path(sys.modules[module]))


def check(kind: str, name: str, obj: Any) -> None:
    """:class:`PluginError` unless ``obj`` can serve as a ``kind``."""
    field = f"{kind}.name"
    if kind == "algorithm":
        if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
            raise PluginError(f"{field}: {name} is not a subclass of fedclock.algorithms.base.Algorithm "
                              f"(got {_describe(obj)})")
        if inspect.isabstract(obj):
            missing = ", ".join(sorted(obj.__abstractmethods__))
            raise PluginError(f"{field}: {name} does not implement the hooks {missing}")
    elif kind == "selection":
        if not (isinstance(obj, type) and issubclass(obj, Selector)) or obj.select is Selector.select:
            raise PluginError(f"{field}: {name} is not a subclass of fedclock.scheduling.selection.Selector with its "
                              f"own select(view, candidates, k) (got {_describe(obj)})")
    elif not callable(obj):
        what = "(input_shape, num_classes) -> nn.Module" if kind == "model" else \
            "() -> mapping with x_train, y_train, x_test, y_test"
        raise PluginError(f"{field}: {name} is not callable (expected a function or class {what}; "
                          f"got {_describe(obj)})")
    elif kind == "model":
        _check_model_builder(field, name, obj)


def _check_model_builder(field: str, name: str, obj: Any) -> None:
    """A model builder is an ``nn.Module`` subclass or a Python function, callable as
    ``(input_shape, num_classes)``: any other class (``builtins:dict``) or a built-in function
    would only fail when the run builds its first model, with a traceback that is not the
    user's (issue 33)."""
    from torch import nn

    expected = "expected an nn.Module subclass or a function (input_shape, num_classes) -> nn.Module"
    if isinstance(obj, type) and not issubclass(obj, nn.Module):
        raise PluginError(f"{field}: {name} is the class {obj.__name__}, not an nn.Module subclass ({expected})")
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        raise PluginError(f"{field}: {name} is {_describe(obj)} whose arguments cannot be read ({expected})") \
            from None
    try:
        signature.bind(None, None)
    except TypeError:
        raise PluginError(f"{field}: {name}{signature} cannot be called with (input_shape, num_classes) "
                          f"({expected})") from None


def _describe(obj: Any) -> str:
    return f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"


def _from_reference(kind: str, name: str, base_dir: Path | None) -> Plugin:
    field = f"{kind}.name"
    if not _REFERENCE.match(name):
        raise PluginError(f"{field}: {name!r} is not a module:attribute reference (e.g. my_{kind}s:Name)")
    module_name, _, attribute = name.partition(":")
    module = import_module(module_name, base_dir, field)
    try:
        obj = functools.reduce(getattr, attribute.split("."), module)
    except AttributeError:
        raise PluginError(f"{field}: module {module_name!r} ({_origin(module)}) has no attribute {attribute!r}") \
            from None
    top = sys.modules[module_name.split(".")[0]]
    return Plugin(kind, name, obj, f"module {_origin(module)}", _ship_path(top))


def _origin(module: Any) -> str:
    """Where a module comes from: its file, or ``built-in`` for one compiled into Python."""
    return str(getattr(module, "__file__", None) or "built-in")


def import_module(module_name: str, base_dir: Path | None, field: str) -> ModuleType:
    """Import ``module_name``, from ``base_dir`` when its top-level module lies there (then
    under its own name, replacing a module of that name imported from elsewhere), else from
    the Python path. A module that does not exist is a :class:`PluginError`; an error while
    it runs propagates (the user's traceback)."""
    top = module_name.split(".")[0]
    if base_dir is not None:
        location = next((p for p in (base_dir / f"{top}.py", base_dir / top / "__init__.py") if p.is_file()), None)
        if location is not None:
            _load_top(top, location.resolve())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise  # a module the user's code imports is missing: their traceback
        where = f"beside the scenario file ({base_dir}) or " if base_dir is not None else ""
        raise PluginError(f"{field}: module {module_name!r} not found {where}on the Python path") from None


def _load_top(top: str, location: Path) -> None:
    current = sys.modules.get(top)
    file = getattr(current, "__file__", None)
    if current is not None and file and Path(file).resolve() == location:
        return
    package = location.name == "__init__.py"
    spec = importlib.util.spec_from_file_location(
        top, location, submodule_search_locations=[str(location.parent)] if package else None)
    assert spec is not None and spec.loader is not None
    for key in [k for k in sys.modules if k == top or k.startswith(top + ".")]:
        del sys.modules[key]  # a same-named module from elsewhere, and its submodules
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[top]
        raise


def _installed_roots() -> list[Path]:
    paths = set(site.getsitepackages()) | {site.getusersitepackages()}
    paths |= {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return [Path(p).resolve() for p in paths if p]


def _ship_path(top: ModuleType) -> str | None:
    """The file or folder of a top-level user module that Ray workers must receive; None for
    fedclock itself, ``__main__`` (cloudpickle sends its objects by value) and installed
    packages."""
    if top.__name__ in ("__main__", "fedclock") or top.__name__.startswith("fedclock."):
        return None
    file = getattr(top, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    path = path.parent if path.name == "__init__.py" else path
    if any(path.is_relative_to(root) for root in _installed_roots()):
        return None
    return str(path)


def algorithm_class(name: str, base_dir: Path | None = None) -> type[Algorithm]:
    """The algorithm class ``name`` refers to: a shipped one, else :func:`find`'s."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    return find("algorithm", name, base_dir, algorithm_names()).obj


def model_builder(name: str, base_dir: Path | None = None) -> Any:
    """None for a shipped model, else the user's ``(input_shape, num_classes) -> nn.Module``."""
    if name in MODEL_NAMES:
        return None
    return find("model", name, base_dir, MODEL_NAMES).obj


def variant_class(name: str, base_dir: Path | None = None) -> Any:
    """The object a ``module:attribute`` variant tag names (an availability ``type``, a device
    distribution's ``dist``, a partition's ``type``: :mod:`fedclock.scheduling.variants`
    checks it is a subclass of the right base); a wrong name is a ValueError of one line
    that the variant's validator prefixes with its key."""
    try:
        return _from_reference("variant", name, base_dir).obj
    except PluginError as exc:
        raise ValueError(str(exc).removeprefix("variant.name: ")) from None
