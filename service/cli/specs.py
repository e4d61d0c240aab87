"""Operator specs from client data, validated by the operators' own models, for every way one comes in.

``warpmap check --spec``, ``warpmap cache import`` (and, later, the API) all accept a spec only if
:func:`compiler.ops.parse_spec` does; this module turns its errors into one readable line.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from compiler.ops import parse_spec


def validated_spec(data: Any) -> Any:
    """The spec model for ``data``, or a ValueError naming each offending field."""
    try:
        return parse_spec(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'spec'}: {error['msg']}" for error in exc.errors()
        )
        raise ValueError(f"invalid spec: {problems}") from None
    except ValueError as exc:
        raise ValueError(f"invalid spec: {exc}") from None
