"""Every docstring example in compiler/, search/, db/ and service/ runs, as one test per module.

The examples are written to ELLIPSIS and NORMALIZE_WHITESPACE. Modules are found from the source tree
(any module whose text holds an example prompt), so a new example joins the suite without a list to
keep; a module whose prompts doctest does not find (say, in a comment) fails rather than passing empty.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("compiler", "search", "db", "service")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
PROMPT = ">>> "


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_with_examples() -> list[str]:
    return sorted(
        module_name(path)
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__main__.py" and PROMPT in path.read_text()
    )


MODULES = modules_with_examples()


def run_examples(module_name: str) -> tuple[int, list[str]]:
    """(examples tried, failure reports) of the module's own docstrings; names it imports are not its."""
    module = importlib.import_module(module_name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    reports: list[str] = []
    for test in doctest.DocTestFinder().find(module):
        runner.run(test, out=reports.append)
    return runner.tries, reports


def test_modules_are_found() -> None:
    assert len(MODULES) >= 30 and "compiler.mapping" in MODULES and "service.cli.table" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    tried, failures = run_examples(name)
    assert tried > 0, f"{name} has example prompts but doctest finds no examples in its docstrings"
    assert not failures, "".join(failures)
