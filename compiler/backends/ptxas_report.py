"""ptxas's resource report (``-Xptxas=-v``), read from a compile log into values.

ptxas writes one block per entry function, and a properties line for every function it emits
(device functions kept out of line included, and not necessarily next to their caller)::

    ptxas info    : Compiling entry function 'gemm' for 'sm_80'
    ptxas info    : Function properties for gemm
    ptxas         .     128 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
    ptxas info    : Used 40 registers, used 1 barriers, 128 bytes cumulative stack size,
                    8192 bytes smem, 368 bytes cmem[0]            (one line in the log)
    ptxas info    : Function properties for _Z6helperPf
    ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

So the ``Used ...`` line belongs to the most recent ``Compiling entry function``, and a stack/spill
line belongs to the function named by the ``Function properties for`` line just before it. Each
comma-separated item of a ``Used`` line is read on its own, because the set of items varies with
the arch and the ptxas version (sm_90 reports no ``cmem``; older versions report no barriers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USED = re.compile(r"Used (?P<registers>\d+) registers(?P<rest>.*)")
_ITEM_PATTERNS = {
    "barriers": re.compile(r"used (\d+) barriers?"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "cumulative_stack": re.compile(r"(\d+) bytes cumulative stack size"),
}
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas allotted one entry function.

    ``shared_bytes`` is static shared memory only (dynamic shared memory is chosen at launch).
    ``constant_bytes`` sums the constant banks ptxas reported, or is None when it reported none.
    """

    registers: int
    shared_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    barriers: int = 0
    constant_bytes: int | None = None

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0


@dataclass
class _Partial:
    # Parsing scratch for one function; frozen into a ResourceUsage at the end.
    used: dict[str, int] = field(default_factory=dict)
    frame: dict[str, int] = field(default_factory=dict)


def parse_ptxas_report(log: str) -> dict[str, ResourceUsage]:
    """Every entry function's resource usage in ``log``, by (possibly mangled) name.

    Example::

        >>> usage = parse_ptxas_report(
        ...     "ptxas info    : Compiling entry function 'k' for 'sm_80'\\n"
        ...     "ptxas info    : Function properties for k\\n"
        ...     "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\\n"
        ...     "ptxas info    : Used 10 registers, used 0 barriers, 360 bytes cmem[0]\\n")
        >>> usage["k"]
        ResourceUsage(registers=10, shared_bytes=0, spill_stores=0, spill_loads=0, stack_frame=0, barriers=0, constant_bytes=360)
    """  # noqa: E501
    functions: dict[str, _Partial] = {}
    entries: list[str] = []
    current_entry: str | None = None
    properties_of: str | None = None
    for line in log.splitlines():
        if match := _ENTRY.search(line):
            current_entry = match["name"]
            entries.append(current_entry)
            functions.setdefault(current_entry, _Partial())
        elif match := _PROPERTIES.search(line):
            properties_of = match["name"]
        elif (match := _FRAME.search(line)) and properties_of is not None:
            functions.setdefault(properties_of, _Partial()).frame = {
                "stack_frame": int(match["stack"]),
                "spill_stores": int(match["stores"]),
                "spill_loads": int(match["loads"]),
            }
            properties_of = None
        elif (match := _USED.search(line)) and current_entry is not None:
            functions[current_entry].used = _used_items(int(match["registers"]), match["rest"])
    return {name: _freeze(functions[name]) for name in entries if functions[name].used}


def _used_items(registers: int, rest: str) -> dict[str, int]:
    items: dict[str, int] = {"registers": registers}
    for name, pattern in _ITEM_PATTERNS.items():
        if found := pattern.search(rest):
            items[name] = int(found[1])
    banks = [int(size) for size in _CMEM.findall(rest)]
    if banks:
        items["constant_bytes"] = sum(banks)
    return items


def _freeze(partial: _Partial) -> ResourceUsage:
    used = dict(partial.used)
    # An entry without a properties line (seen in older ptxas) still reports its stack here.
    stack = used.pop("cumulative_stack", 0)
    frame = {"stack_frame": stack, **partial.frame}
    return ResourceUsage(**used, **frame)


def entry_usage(log: str, entry: str) -> ResourceUsage | None:
    """The usage of ``entry`` in ``log``; None when ptxas reported nothing for it (a PTX-only build,
    or ``-Xptxas=-v`` not given)."""
    return parse_ptxas_report(log).get(entry)
