"""Names for shared-memory addresses in fault messages.

A kernel's static ``__shared__`` arrays are the thread-local (TLS) symbols of its shared object, at
offsets from the start of the block's shared memory; ``readelf`` lists them. Only fault paths call
this, so the extra process costs nothing on a successful launch.

Example: ``[static+4100]`` in a kernel whose arrays are ``Bs`` (4096 bytes) then ``As`` (4096 bytes)
becomes ``__shared__ 'As' at byte 4 of 4096``.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_TLS_LINE = re.compile(r"^\s*\d+:\s+([0-9a-fA-F]+)\s+(\d+)\s+TLS\s+\w+\s+\w+\s+\d+\s+(.+)$", re.MULTILINE)
_LOCATION = re.compile(r"\[(static|dynamic)\+(\d+)\]")


@dataclass(frozen=True)
class SharedSymbol:
    name: str
    offset: int
    size: int


def shared_symbols(library: Path) -> list[SharedSymbol]:
    """The static shared arrays of a compiled kernel, by offset; empty if readelf is unavailable."""
    try:
        out = subprocess.run(
            ["readelf", "-sW", "--demangle", str(library)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = {}
    for value, size, name in _TLS_LINE.findall(out):
        if int(size) > 0:
            found[name] = SharedSymbol(name.rsplit("::", 1)[-1], int(value, 16), int(size))
    return sorted(found.values(), key=lambda s: s.offset)


def describe_shared_locations(message: str, library: Path) -> str:
    """Replace ``[static+N]`` / ``[dynamic+N]`` markers in a runtime message with array names."""
    if not _LOCATION.search(message):
        return message
    symbols: list[SharedSymbol] | None = None

    def name(match: re.Match[str]) -> str:
        nonlocal symbols
        region, offset = match.group(1), int(match.group(2))
        if region == "dynamic":
            return f"extern __shared__ memory at byte {offset}"
        if symbols is None:
            symbols = shared_symbols(library)
        for s in symbols:
            if s.offset <= offset < s.offset + s.size:
                return f"__shared__ '{s.name}' at byte {offset - s.offset} of {s.size}"
        return f"static shared memory at byte {offset}"

    return _LOCATION.sub(name, message)
