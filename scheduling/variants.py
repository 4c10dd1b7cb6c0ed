"""A config union open to a user's own variant: the shipped classes by their tag, or a
user's subclass named by ``module:attribute`` in the same key.

Availability models (``type:``), device distributions (``dist:``) and partitions
(``type:``) are each a base class whose variants carry their own behaviour (one method:
``build``, ``sample``, ``owners``), SimPy-style: a new variant is one class. A user's
variant is such a subclass in a file beside the scenario; the scenario names it as the tag
(``dist: "my_dists:Pareto"``) and its other keys are the class's own fields.

The loader puts the lookup of such names in the validation context (``plugins``, a function
``(name) -> object`` that raises a one-line ValueError; :mod:`fedclock.scenarios.plugins`),
so this layer imports none of it. Without a lookup (``fedclock validate --no-import``) the
mapping is kept as an unresolved variant that cannot act.
"""
from __future__ import annotations

from typing import Any, Callable

from pydantic import (BaseModel, SerializationInfo, SerializerFunctionWrapHandler, ValidationError, ValidationInfo,
                      ValidatorFunctionWrapHandler, WrapSerializer, WrapValidator)

PluginLookup = Callable[[str], Any]
"""What the loader puts in the validation context as ``plugins``: the object a
``module:attribute`` name refers to (or a one-line ValueError)."""


def open_union(base: type[BaseModel], key: str, method: str, signature: str, builtin: tuple[type, ...],
               unresolved: type[BaseModel]) -> tuple[WrapValidator, WrapSerializer]:
    """The validator and serializer that open a discriminated union of ``builtin`` variants
    (discriminated by ``key``) to a user's subclass of ``base`` with its own ``method``
    (``signature`` is how the error message writes the method). Annotate the union with both."""
    base_name = f"{base.__module__}.{base.__qualname__}"

    def validate(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        name = value.get(key) if isinstance(value, dict) else None
        if not (isinstance(name, str) and ":" in name):
            return handler(value)
        lookup: PluginLookup | None = (info.context or {}).get("plugins")
        if lookup is None:  # validated without imports
            return unresolved.model_validate(value)
        try:
            cls = lookup(name)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, base)) or getattr(cls, method) is getattr(base, method):
            raise ValueError(f"{key}: {name} is not a subclass of {base_name} with its own {signature}")
        try:
            return cls.model_validate(value, context=info.context)
        except ValidationError as exc:  # one line, naming the plugin's own fields
            err = exc.errors()[0]
            where = ".".join(str(part) for part in err["loc"]) or key
            text = f"unknown field (allowed: {', '.join(cls.model_fields)})" if err["type"] == "extra_forbidden" \
                else str(err["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{where}: {text}") from None

    def serialize(value: Any, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        return handler(value) if isinstance(value, builtin) else value.model_dump(mode=info.mode)

    return WrapValidator(validate), WrapSerializer(serialize)
