"""No module-level constant is defined and then never used: a dead constant reads as a live rule.

A name counts as used when it appears (as a whole word) anywhere in the project's Python besides its
own definition: in code, tests, benches or examples, or in its module's ``__all__``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("compiler", "search", "db", "service")
READERS = (*PACKAGES, "migrations", "tests", "bench", "examples")
CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")


def module_constants(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of the UPPER_CASE names a module assigns at its top level."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names = [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        found += [(node.lineno, name) for name in names if CONSTANT.fullmatch(name)]
    return found


def unused_constants(texts: dict[Path, str], owners: list[Path]) -> list[str]:
    """``path:line: NAME`` for each constant of ``owners`` that no text mentions beyond its definition."""
    unused = []
    for path in owners:
        for line, name in module_constants(ast.parse(texts[path])):
            word = re.compile(rf"\b{re.escape(name)}\b")
            if sum(len(word.findall(text)) for text in texts.values()) <= 1:
                unused.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    return unused


def test_every_module_constant_is_used() -> None:
    texts = {path: path.read_text() for folder in READERS for path in sorted((ROOT / folder).rglob("*.py"))}
    owners = [path for path in texts if path.relative_to(ROOT).parts[0] in PACKAGES]
    assert len(owners) > 50
    unused = unused_constants(texts, owners)
    assert not unused, "module constants that nothing uses:\n" + "\n".join(unused)


def test_a_constant_used_only_where_it_is_defined_is_found() -> None:
    module = ROOT / "db" / "example.py"
    texts = {
        module: "LIVE = 1\nDEAD: tuple[str, ...] = ('a',)\n_HIDDEN = LIVE + 1\nlower = 2\n",
        ROOT / "tests" / "test_example.py": "from db.example import _HIDDEN\n",
    }
    assert unused_constants(texts, [module]) == ["db/example.py:2: DEAD"]
