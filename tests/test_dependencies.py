"""Every third-party module the installed packages import is brought by what ``pyproject.toml`` declares.

A module imported by ``compiler``, ``search``, ``db``, ``service`` or ``migrations`` must come from a
distribution in the closure of the project's dependencies (their own requirements included, so
``starlette`` through ``fastapi`` counts), or, for a module imported only where an optional feature
needs it, from the closure of one of the extras. Otherwise ``pip install warpmap`` gives a package that
fails on import in the field while every test passes in the development environment, which installs
more. The imports are read by the layering test's reader, lazy ones included.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.test_layering import ROOT, _module_name, imported_modules

LAYERS = ("compiler", "search", "db", "service", "migrations")

#: Modules imported only behind an optional feature, and the extra that brings each.
OPTIONAL = {"psycopg": "postgres", "scipy": "gp", "torch": "gp"}


def closure(requirements: list[str]) -> set[str]:
    """The canonical names of the installed distributions these requirements bring, transitively.

    A requirement whose marker does not hold here (another platform, an extra not asked for) brings
    nothing; one that is not installed is kept by name, so the check below names what is missing."""
    seen: set[str] = set()
    todo = [r for r in map(Requirement, requirements) if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            child = Requirement(text)
            extras = requirement.extras or {""}
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                todo.append(child)
    return seen


def third_party_imports() -> dict[str, list[str]]:
    """Top-level third-party module -> the files that import it."""
    found: dict[str, list[str]] = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for _, name in imported_modules(tree, _module_name(path), is_package=path.name == "__init__.py"):
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LAYERS:
                    found.setdefault(top, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_imported_module_is_brought_by_a_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = closure(project["dependencies"])
    extras = {name: closure(requirements) for name, requirements in project["optional-dependencies"].items()}
    providers = metadata.packages_distributions()
    missing = []
    for module, files in sorted(third_party_imports().items()):
        extra = OPTIONAL.get(module)
        declared = extras.get(extra, set()) if extra else runtime
        # A module that is not installed here is named by itself (the project's gp extra, for one).
        distributions = {canonicalize_name(d) for d in providers.get(module, [module])}
        if not distributions & declared:
            where = f"the {extra!r} extra" if extra else "[project] dependencies"
            missing.append(f"{module} ({', '.join(sorted(distributions))}), imported by {files[0]}, "
                           f"is not in {where}")
    assert not missing, "\n".join(missing)


def test_the_check_follows_requirements_and_their_markers() -> None:
    brought = closure(["fastapi"])
    assert "starlette" in brought and "pydantic" in brought  # fastapi's own requirements
    assert closure(["numpy"]) == {"numpy"}
    assert closure(['numpy; sys_platform == "no-such-platform"']) == set()
    # An optional module counts only through its own extra.
    assert set(OPTIONAL.values()) <= set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                                         ["project"]["optional-dependencies"])
