"""Operator specs from client data, validated by the operators' own models, for every way one comes in.

``warpmap check --spec``, ``warpmap tune --spec`` and ``warpmap cache import`` all accept a spec only if
:func:`compiler.ops.parse_spec` does; this module turns its errors into one readable line, and refuses
up front a spec whose tensors this machine's memory cannot hold.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from compiler.ops import get_operator, parse_spec
from compiler.ops.spec import DTYPE_BYTES
from service.cli.errors import CliError


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


def host_bytes_needed(min_bytes: int, elements: int) -> int:
    """Host memory a check or a tuning holds at its peak, for tensors of ``elements`` elements in
    ``min_bytes``.

    The inputs are kept (once) and copied for the launch, outputs likewise; the inputs are drawn in
    float64 before rounding to their dtype, and the reference and the compared outputs are float64.
    """
    return 2 * min_bytes + 2 * 8 * elements


def check_memory(spec: Any, available: int | None) -> None:
    """A CliError saying how much memory ``spec`` needs when ``available`` bytes (None: unknown) cannot
    hold it: such a spec would be refused by every candidate, or take the machine's memory, only later."""
    min_bytes = get_operator(spec.op).min_bytes(spec)
    needed = host_bytes_needed(min_bytes, min_bytes // DTYPE_BYTES[spec.dtype])
    if available is not None and needed > available:
        raise CliError(f"this spec needs about {needed / 2**30:.1f} GiB of host memory for its inputs, outputs "
                       f"and float64 reference; {available / 2**30:.1f} GiB is available")
