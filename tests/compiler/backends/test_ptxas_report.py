from __future__ import annotations

import pytest

from compiler.backends.ptxas_report import ResourceUsage, entry_usage, parse_ptxas_report

# Captured from NVRTC 13.5 (-arch=sm_80 -Xptxas=-v): two entries and an out-of-line device function
# whose properties are printed after an entry's block, not before it.
TWO_ENTRIES_SM80 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'g2' for 'sm_80'
ptxas info    : Function properties for g2
ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 128 bytes cumulative stack size, 8192 bytes smem, 368 bytes cmem[0]
ptxas info    : Compile time = 4.084 ms
ptxas info    : Function properties for _Z1fPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'g' for 'sm_80'
ptxas info    : Function properties for g
ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 128 bytes cumulative stack size, 360 bytes cmem[0]
ptxas info    : Compile time = 2.661 ms
ptxas info    : Function properties for _Z1fPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""

# Captured from NVRTC 13.5 (-arch=sm_80, __launch_bounds__(1024, 2)): spills.
SPILLING_SM80 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sp' for 'sm_80'
ptxas info    : Function properties for sp
ptxas         .     2496 bytes stack frame, 2692 bytes spill stores, 6964 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 2496 bytes cumulative stack size, 360 bytes cmem[0]
ptxas info    : Compile time = 298.426 ms
"""

# Captured from NVRTC 13.5 (-arch=sm_90a): no constant bank reported; a maxrregcount notice first.
SM90A = """\
ptxas info    : Overriding maximum register limit 256 for 'add' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'add' for 'sm_90a'
ptxas info    : Function properties for add
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 12.978 ms
"""

# The shape older ptxas versions print: no barriers item, several constant banks, no properties.
OLDER = """\
ptxas info    : Compiling entry function '_Z4gemmPKfS0_Pf' for 'sm_75'
ptxas info    : Used 64 registers, 4096 bytes smem, 372 bytes cmem[0], 8 bytes cmem[2]
"""


def test_several_functions() -> None:
    report = parse_ptxas_report(TWO_ENTRIES_SM80)
    assert list(report) == ["g2", "g"]  # entries only, in log order; device functions excluded
    assert report["g2"] == ResourceUsage(
        registers=32,
        shared_bytes=8192,
        spill_stores=0,
        spill_loads=0,
        stack_frame=128,
        barriers=1,
        constant_bytes=368,
    )
    assert report["g"] == ResourceUsage(registers=32, shared_bytes=0, stack_frame=128, barriers=0, constant_bytes=360)


def test_entry_usage_picks_the_named_entry() -> None:
    assert entry_usage(TWO_ENTRIES_SM80, "g") == parse_ptxas_report(TWO_ENTRIES_SM80)["g"]
    assert entry_usage(TWO_ENTRIES_SM80, "_Z1fPf") is None  # a device function, not an entry
    assert entry_usage(TWO_ENTRIES_SM80, "absent") is None


def test_spills() -> None:
    usage = entry_usage(SPILLING_SM80, "sp")
    assert usage is not None
    assert (usage.spill_stores, usage.spill_loads, usage.stack_frame) == (2692, 6964, 2496)
    assert usage.spills


def test_sm90a_without_constant_bank() -> None:
    usage = entry_usage(SM90A, "add")
    assert usage == ResourceUsage(registers=10, barriers=0, constant_bytes=None)
    assert not usage.spills


def test_older_format_sums_constant_banks() -> None:
    usage = entry_usage(OLDER, "_Z4gemmPKfS0_Pf")
    assert usage == ResourceUsage(registers=64, shared_bytes=4096, barriers=0, constant_bytes=380)


@pytest.mark.parametrize("log", ["", "kern.cu(3): error: expected an expression", "ptxas info    : 0 bytes gmem"])
def test_no_report(log: str) -> None:
    assert parse_ptxas_report(log) == {}
