"""Cache keys: pure functions that name everything able to change a tuning answer.

A key is a short, stable, human-readable string. Two results share a key exactly when they are
interchangeable: the same operator spec, on the same device model under the same driver, built by the
same toolchain.

>>> canonical_json({"n": 1024, "dtype": "float16", "m": 512})
'{"dtype":"float16","m":512,"n":1024}'
>>> workload_key(op="matmul", spec={"m": 512, "n": 1024, "dtype": "float16"})[:15]
'matmul:1776f0be'
>>> device_key(name="NVIDIA H100 80GB HBM3", arch="sm_90", driver="580.65.06")
'nvidia-h100-80gb-hbm3/sm_90/580.65.06'
>>> warpmap_build(version="0.1.0", sources="9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
'0.1.0+src.9f86d081884c7d65'
>>> toolchain_key(warpmap="0.1.0+src.9f86d081884c7d65", nvrtc="13.5", host_compiler="g++ 12.2.0")
'warpmap-0.1.0+src.9f86d081884c7d65/nvrtc-13.5/g++-12.2.0'
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

#: Hex digits of the spec hash kept in a workload key: 64 bits make an accidental clash negligible.
WORKLOAD_HASH_CHARS = 16

_UNSAFE = re.compile(r"[^a-z0-9._+-]+")


def _check_finite(value: Any, path: str) -> None:
    """NaN and infinities have no JSON spelling, so a spec holding one has no canonical form."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"spec value at {path or '<root>'} is {value!r}: not representable in JSON")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"spec key {key!r} at {path or '<root>'} is not a string")
            _check_finite(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_finite(item, f"{path}[{index}]")


def canonical_json(spec: Mapping[str, Any]) -> str:
    """The one text form of a spec: sorted keys, no whitespace, UTF-8 kept as is, tuples as lists."""
    _check_finite(spec, "")
    try:
        return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"spec is not plain JSON data: {exc}") from exc


def spec_hash(spec: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``spec``."""
    return hashlib.sha256(canonical_json(spec).encode("utf-8")).hexdigest()


def _slug(text: str, what: str) -> str:
    slug = _UNSAFE.sub("-", text.strip().lower()).strip("-")
    if not slug:
        raise ValueError(f"{what} {text!r} has no usable characters for a key")
    return slug


def workload_key(*, op: str, spec: Mapping[str, Any]) -> str:
    """``<op>:<first 16 hex digits of spec_hash(spec)>``."""
    return f"{_slug(op, 'operator')}:{spec_hash(spec)[:WORKLOAD_HASH_CHARS]}"


def device_key(*, name: str, arch: str, driver: str) -> str:
    """``<name>/<arch>/<driver>``; ``arch`` is a compute capability (``sm_90``) or a host ISA."""
    return "/".join((_slug(name, "device name"), _slug(arch, "architecture"), _slug(driver, "driver")))


def warpmap_build(*, version: str, sources: str) -> str:
    """``<version>+src.<first 16 hex digits of sources>``: the warpmap that built a kernel, exactly.

    The release version alone does not say which template code tuned a kernel: an edited template
    (or codegen, or emulator header) changes the answer under the same version. ``sources`` is a hex
    digest of the compiler package's sources, made by the caller (``compiler.toolchain.source_digest``:
    storage knows nothing of the compiler); it rides in the version as a local label, so it is part of
    every toolchain key and round-trips through the stored version.
    """
    if not re.fullmatch(r"[0-9a-f]{16,}", sources):
        raise ValueError(f"sources must be a hex digest of at least {WORKLOAD_HASH_CHARS} digits, got {sources!r}")
    return f"{version.strip()}+src.{sources[:WORKLOAD_HASH_CHARS]}"


def toolchain_key(*, warpmap: str, nvrtc: str, host_compiler: str) -> str:
    """``warpmap-<v>/nvrtc-<v>/<host compiler>``; ``nvrtc`` is ``none`` for host-only targets.

    ``warpmap`` is :func:`warpmap_build`'s version with the source digest; the device is keyed apart
    (:func:`device_key`).
    """
    return (
        f"warpmap-{_slug(warpmap, 'warpmap version')}/nvrtc-{_slug(nvrtc, 'NVRTC version')}"
        f"/{_slug(host_compiler, 'host compiler')}"
    )
