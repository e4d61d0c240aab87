"""`warpmap worker` and `warpmap serve` refuse bad input in one line (exit 2), before starting anything."""

from __future__ import annotations

from typing import Any

import pytest

from service.cli import main


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_worker_needs_postgresql(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    err = _fails(capsys, ["worker", "--database", f"sqlite:///{tmp_path / 'x.db'}", "--target", "cpu"])
    assert "needs PostgreSQL" in err and "warpmap serve" in err


@pytest.mark.parametrize("target", ["gpu", "cpu:1", "cuda:x", "cuda:-1"])
def test_a_worker_refuses_a_target_it_cannot_name(capsys: pytest.CaptureFixture[str], target: str) -> None:
    err = _fails(capsys, ["worker", "--database", "postgresql+psycopg://u@127.0.0.1:1/db", "--target", target])
    assert "--target must be cpu, cuda or cuda:N" in err


@pytest.mark.postgres
def test_a_worker_wants_the_newest_schema(capsys: pytest.CaptureFixture[str], postgres_server: Any) -> None:
    url = postgres_server.url(postgres_server.create_database())
    err = _fails(capsys, ["worker", "--database", url, "--target", "cpu"])
    assert "run `warpmap db upgrade` first" in err


@pytest.mark.parametrize(("argv", "phrase"), [
    (["serve", "--port", "0"], "--port must be between 1 and 65535"),
    (["serve", "--port", "70000"], "--port must be between 1 and 65535"),
    (["serve", "--workers", "-1"], "--workers must be 0 or more"),
])
def test_serve_refuses_bad_options(capsys: pytest.CaptureFixture[str], argv: list[str], phrase: str) -> None:
    assert phrase in _fails(capsys, argv)


def test_both_commands_have_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("worker", "serve"):
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        assert "--target" in capsys.readouterr().out or command == "serve"
