"""The toolchain key names the exact code that built a kernel: release, source digest, NVRTC, host compiler."""

from __future__ import annotations

import pytest

from db.keys import toolchain_key, warpmap_build
from db.records import ToolchainInfo

DIGEST_A = "0123456789abcdef" + "0" * 48
DIGEST_B = "0123456789abcdee" + "0" * 48


def test_the_warpmap_part_of_the_key_carries_the_source_digest() -> None:
    build = warpmap_build(version="0.1.0", sources=DIGEST_A)
    assert build == "0.1.0+src.0123456789abcdef"
    key = ToolchainInfo(warpmap=build, nvrtc="13.5", host_compiler="g++ 12.2.0").key
    assert key == "warpmap-0.1.0+src.0123456789abcdef/nvrtc-13.5/g++-12.2.0"


def test_same_version_other_sources_is_another_toolchain() -> None:
    keys = {
        toolchain_key(warpmap=warpmap_build(version="0.1.0", sources=digest), nvrtc="13.5", host_compiler="g++")
        for digest in (DIGEST_A, DIGEST_B)
    }
    assert len(keys) == 2
    same = toolchain_key(warpmap=warpmap_build(version="0.1.0", sources=DIGEST_A), nvrtc="13.5", host_compiler="g++")
    assert same in keys


@pytest.mark.parametrize("sources", ["", "abc", "0123456789ABCDEF", "not-a-digest-at-all!"])
def test_a_missing_or_malformed_digest_is_refused(sources: str) -> None:
    with pytest.raises(ValueError, match="hex digest"):
        warpmap_build(version="0.1.0", sources=sources)


def test_the_callers_digest_fits_and_the_key_module_imports_no_compiler() -> None:
    import ast
    from pathlib import Path

    import db.keys

    tree = ast.parse(Path(db.keys.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "compiler" for name in imported), imported

    from compiler.toolchain import source_digest, warpmap_version

    build = warpmap_build(version=warpmap_version(), sources=source_digest())
    assert build.endswith("+src." + source_digest()[:16]) and len(build) <= 64  # the stored column's width
