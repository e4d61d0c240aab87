"""The digest of the compiler's sources that keys the toolchain: it moves with any template edit, only then."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compiler import toolchain
from compiler.toolchain import digest_sources, source_digest

PACKAGE = Path(toolchain.__file__).resolve().parent


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    root = tmp_path / "compiler"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_the_digest_is_of_the_sources_not_of_where_they_lie(copy: Path) -> None:
    assert len(source_digest()) == 64 and source_digest() == source_digest()
    assert digest_sources(copy) == source_digest()


@pytest.mark.parametrize("relative", ["ops/matmul_simt.py", "ops/gemm_mma.py", "codegen/__init__.py"])
def test_editing_one_byte_of_a_source_changes_the_digest(copy: Path, relative: str) -> None:
    before = digest_sources(copy)
    _flip_one_byte(copy / relative)
    assert digest_sources(copy) != before


def test_headers_and_emulator_sources_count(copy: Path) -> None:
    headers = sorted(p for p in copy.rglob("*") if p.suffix in (".cuh", ".h", ".c"))
    assert headers, "the package ships device headers"
    for header in headers[:3]:
        before = digest_sources(copy)
        _flip_one_byte(header)
        assert digest_sources(copy) != before, header


def test_bytecode_data_and_renames(copy: Path) -> None:
    before = digest_sources(copy)
    (copy / "ops" / "__pycache__").mkdir(exist_ok=True)
    (copy / "ops" / "__pycache__" / "matmul_simt.cpython-311.pyc").write_bytes(b"\0" * 64)
    (copy / "notes.txt").write_text("not a source")
    assert digest_sources(copy) == before
    (copy / "ops" / "softmax.py").rename(copy / "ops" / "softmax2.py")
    assert digest_sources(copy) != before


def test_the_order_files_were_written_in_does_not_matter(tmp_path: Path) -> None:
    files = {"b.py": "x = 1\n", "a/z.cuh": "// z\n", "a/y.h": "// y\n", "c.c": "int c;\n"}
    roots = []
    for name, order in (("one", sorted(files)), ("two", sorted(files, reverse=True))):
        root = tmp_path / name
        for relative in order:
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(files[relative])
        roots.append(root)
    assert digest_sources(roots[0]) == digest_sources(roots[1])
    # Moving bytes from one file to the next is a different tree, not the same concatenation.
    (roots[1] / "b.py").write_text("x = 1\n// z\n")
    (roots[1] / "a/z.cuh").write_text("")
    assert digest_sources(roots[0]) != digest_sources(roots[1])
