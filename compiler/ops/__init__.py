"""Operator templates, found by name: each module of this package that defines ``OPERATOR`` is one.

Adding an operator means adding one module; nothing else lists them.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from compiler.ops.base import Operator


@cache
def operators() -> dict[str, Operator]:
    found: dict[str, Operator] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        operator = getattr(module, "OPERATOR", None)
        if operator is not None:
            found[operator.name] = operator
    return found


def get_operator(name: str) -> Operator:
    known = operators()
    if name not in known:
        raise ValueError(f"unknown operator {name!r}; known operators: {', '.join(sorted(known)) or 'none'}")
    return known[name]


def parse_spec(data: dict[str, Any]) -> Any:
    """The validated spec model for a client's JSON object, chosen by its ``op`` field."""
    if not isinstance(data, dict) or "op" not in data:
        raise ValueError('an operator spec is a JSON object with an "op" field')
    return get_operator(str(data["op"])).spec_model.model_validate(data)
