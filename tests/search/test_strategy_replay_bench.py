"""``bench/strategy_replay.py``'s ``--hybrid``: a measured variant of the hybrid strategy is one option
away, its fields parsed by type and a bad one refused in one line with exit status 2."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("strategy_replay", ROOT / "bench" / "strategy_replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_hybrid_variant_takes_typed_fields_and_is_named_by_them() -> None:
    variant = _bench().hybrid_variant("kernel=additive, additive_after=50,spread_centres=true")
    assert (variant.kernel, variant.additive_after, variant.spread_centres) == ("additive", 50, True)
    assert variant.name == "hybrid(kernel=additive, additive_after=50,spread_centres=true)"
    assert _bench().hybrid_variant("").kernel == "switch"  # no options: the default's


@pytest.mark.parametrize(("options", "message"), [("bogus=1", "bogus"), ("kernel=gp", "unknown kernel 'gp'"),
                                                  ("switch", "'switch' is not key=value")])
def test_a_bad_variant_is_refused_before_any_file_is_read(options, message, capsys) -> None:
    assert _bench().main(["--file", "missing.json.gz", "--hybrid", options]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
