"""``warpmap ops [NAME]``: every operator's spec fields, read from its pydantic model's JSON schema.

The table is derived from the same models that validate ``--spec`` (and, later, the API's request
bodies), so it cannot drift from what is accepted.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from compiler.ops import get_operator, operators
from service.cli.errors import CliError
from service.cli.table import format_table

#: The value an example spec gives a required integer, clamped into the field's bounds.
_EXAMPLE_INT = 8


def run(args: argparse.Namespace) -> int:
    if args.operator is None:
        names = sorted(operators())
    else:
        try:
            names = [get_operator(args.operator).name]
        except ValueError as exc:
            raise CliError(str(exc)) from None
    blocks = [describe(name, schema_of(name), detail=args.operator is not None) for name in names]
    print("\n\n".join(blocks))
    if args.operator is None:
        print("\n`warpmap ops NAME` describes one operator; pass a spec to `warpmap check --spec`.")
    return 0


def schema_of(name: str) -> dict[str, Any]:
    return get_operator(name).spec_model.model_json_schema()


def describe(name: str, schema: dict[str, Any], *, detail: bool) -> str:
    """The operator's summary (or whole description), its fields as a table, and an example spec."""
    text = _description(schema)
    summary = _indented(text if detail else text[:1])
    required = set(schema.get("required", ()))
    rows = [
        [field, type_of(prop), bounds_of(prop), "required" if field in required else _shown(prop.get("default"))]
        for field, prop in schema["properties"].items()
        if "const" not in prop  # the ``op`` field: the operator's name itself
    ]
    table = format_table(["field", "type", "bounds", "default"], rows)
    example = json.dumps(example_spec(name, schema), separators=(", ", ": "))
    return f"{name}\n{summary}\n\n{_indented(table.splitlines())}\n\n  example: warpmap check --spec '{example}'"


def _indented(lines: list[str]) -> str:
    return "\n".join(f"  {line}" if line.strip() else "" for line in lines)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _description(schema: dict[str, Any]) -> list[str]:
    """The model's docstring without its doctests, as lines."""
    lines: list[str] = []
    for line in schema.get("description", "").splitlines():
        if line.startswith((">>>", "...")) or (lines and lines[-1].startswith(">>>")):
            break
        lines.append(line.replace("``", "`"))
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def type_of(prop: dict[str, Any]) -> str:
    """A short name for a JSON-schema type: ``integer``, ``row|col``, ``[integer, integer]``, ``list of ...``."""
    if "enum" in prop:
        return "|".join(str(value) for value in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(type_of(option) for option in prop["anyOf"])
    if prop.get("type") == "array":
        if "prefixItems" in prop:
            return "[" + ", ".join(type_of(item) for item in prop["prefixItems"]) + "]"
        return f"list of {type_of(prop.get('items', {}))}"
    return str(prop.get("type", "any"))


def bounds_of(prop: dict[str, Any]) -> str:
    """``1..65535``, ``>= 1``, ``1-8 items, each 1..1073741824`` or empty when the field is unbounded."""
    parts = []
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        parts.append(f"{low}..{high}")
    elif low is not None:
        parts.append(f">= {low}")
    elif high is not None:
        parts.append(f"<= {high}")
    for key, sign in (("exclusiveMinimum", ">"), ("exclusiveMaximum", "<")):
        if key in prop:
            parts.append(f"{sign} {prop[key]}")
    if prop.get("type") == "array" and "prefixItems" not in prop:
        fewest, most = prop.get("minItems", 0), prop.get("maxItems")
        parts.append(f"{fewest}-{most} items" if most is not None else f">= {fewest} items")
        inner = bounds_of(prop.get("items", {}))
        if inner:
            parts.append(f"each {inner}")
    return ", ".join(parts)


def example_value(prop: dict[str, Any]) -> Any:
    """A value a required field accepts: the first choice, or a small number inside the bounds."""
    if "enum" in prop:
        return prop["enum"][0]
    if "anyOf" in prop:
        return example_value(prop["anyOf"][0])
    kind = prop.get("type")
    if kind == "array":
        if "prefixItems" in prop:
            return [example_value(item) for item in prop["prefixItems"]]
        return [example_value(prop.get("items", {}))] * max(1, prop.get("minItems", 1))
    if kind in ("integer", "number"):
        value = _EXAMPLE_INT if "minimum" in prop or "maximum" in prop else 0
        return min(max(value, prop.get("minimum", value)), prop.get("maximum", value))
    if kind == "boolean":
        return False
    return ""


def example_spec(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The model's first declared example, or the operator's name and a value for each required field
    (a test checks that either validates)."""
    if schema.get("examples"):
        example = schema["examples"][0]
        return {"op": example["op"], **{key: value for key, value in example.items() if key != "op"}}
    required = schema.get("required", ())
    return {"op": name, **{field: example_value(schema["properties"][field]) for field in required}}
