"""The layers import only downwards: compiler < db < search < service, and migrations sit beside db.

Storage must not know compiler objects and the compiler must not know where its results go, so each
package may import only the layers below it. The rule is read from the source with ``ast`` (every
``import``, at any depth, type-checking blocks included), so a lazy import inside a function counts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: For each layer, the top-level packages of this project it must never import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "compiler": frozenset({"search", "db", "service"}),
    "db": frozenset({"compiler", "search", "service"}),
    "migrations": frozenset({"compiler", "search", "service"}),
    "search": frozenset({"service"}),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST, module: str, *, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``tree``; relative imports are resolved."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.lineno, node.module or ""
            else:
                base = package[: len(package) - (node.level - 1)]
                yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])


def violations(path: Path, text: str | None = None) -> list[str]:
    """One line per import in ``path`` (or in ``text``, read as that file) that crosses the layers."""
    module = _module_name(path)
    forbidden = FORBIDDEN[module.split(".")[0]]
    tree = ast.parse(path.read_text() if text is None else text, filename=str(path))
    return [
        f"{path.relative_to(ROOT)}:{line}: {module} imports {target}"
        for line, target in imported_modules(tree, module, is_package=path.name == "__init__.py")
        if target.split(".")[0] in forbidden
    ]


def _sources(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    sources = _sources(layer)
    assert sources, f"no Python files under {layer}/"
    found = [line for path in sources for line in violations(path)]
    assert not found, "imports that cross the layers:\n" + "\n".join(found)


def test_the_check_sees_every_kind_of_import() -> None:
    """Type-checking, lazy and relative imports all count, resolved against the importing module."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from compiler.source import KernelSource\n"
        "def f():\n"
        "    import search.trial as trial\n"
        "from . import keys\n"
        "from ..service import cli\n"
    )
    found = set(imported_modules(ast.parse(source), "db.records", is_package=False))
    assert found == {(1, "typing"), (3, "compiler.source"), (5, "search.trial"), (6, "db"), (7, "service")}
    package = set(imported_modules(ast.parse("from .models import Base"), "db", is_package=True))
    assert package == {(1, "db.models")}


def test_a_crossing_import_is_reported_with_its_place() -> None:
    records = ROOT / "db" / "records.py"
    text = "from db.keys import canonical_json\n\nfrom compiler.source import KernelSource\n"
    assert violations(records, text) == ["db/records.py:3: db.records imports compiler.source"]
    assert violations(ROOT / "search" / "verify.py", "from db.records import KernelResult\n") == []
