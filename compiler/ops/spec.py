"""The base of every operator spec: a strict, frozen pydantic model that is also the client's JSON.

Specs are the request bodies of the API and of ``warpmap check --spec``, so they are strict: an int
field takes a JSON integer only (not ``true``, ``3.0`` or ``"3"``), a bool field a JSON boolean. The one
conversion kept is list -> tuple, since JSON has no tuples: declare tuple fields with
``Field(strict=False)``; their items stay strict (the model's setting applies to them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict

DType = Literal["float32", "float16", "bfloat16"]

#: Bytes per element of each spec dtype.
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}

#: No single tensor of a spec may exceed this many bytes: bigger requests are mistakes, not workloads.
MAX_TENSOR_BYTES = 64 * 1024**3


class OpSpec(BaseModel):
    """Fields common to every operator spec. Subclasses add ``op: Literal[...]`` and their dimensions."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def canonical_json(self) -> str:
        """Every field, defaults included, keys sorted, no whitespace: the same text for the same workload."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def workload_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def check_tensor_bytes(label: str, elements: int, dtype: str) -> None:
    """Raise a ValueError naming the tensor if it would exceed ``MAX_TENSOR_BYTES``."""
    size = elements * DTYPE_BYTES[dtype]
    if size > MAX_TENSOR_BYTES:
        raise ValueError(
            f"{label} would take {size / 1024**3:.1f} GiB; the limit is {MAX_TENSOR_BYTES // 1024**3} GiB"
        )
