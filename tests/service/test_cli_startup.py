"""The parser and ``--version`` load no heavy module, so every command starts quickly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from compiler.backends import TARGETS
from service.cli import build_parser, main
from service.cli.args.check import TARGET_NAMES

HEAVY = ("numpy", "sqlalchemy", "alembic", "optuna", "cuda", "pydantic", "fastapi")

PROBE = """
import sys
from service.cli import build_parser
parser = build_parser()
for argv in (["check", "--spec", "{}"], ["cache", "ls"], ["db", "upgrade"], ["doctor"], ["ops"]):
    parser.parse_args(argv)
print(" ".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_building_and_parsing_imports_nothing_heavy() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    loaded = set(done.stdout.split())
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("warpmap 0.")


def test_the_device_choices_are_the_backends() -> None:
    assert set(TARGET_NAMES) == set(TARGETS)


def test_gpu_names_are_case_insensitive() -> None:
    args = build_parser().parse_args(["check", "--spec", "{}", "--gpu", "H200"])
    assert args.gpu == "h200"
