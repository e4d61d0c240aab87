"""Search strategies over schedule spaces: one interface, Optuna's samplers and ours.

``search(space, objective, strategy, budget, storage=..., study_key=...)`` runs one strategy in one
Optuna study. ``DEFAULT`` names the strategy ``warpmap tune`` uses when none is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compiler.space import Space
from search.strategies.base import Budget, History, Objective, Outcome, SearchResult, Strategy, TrialRecord
from search.strategies.driver import INVALID_MODES, SpaceExhausted, StudyMismatchError, run_search
from search.strategies.hybrid import Hybrid
from search.strategies.samplers import Exhaustive, SamplerStrategy

STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "tpe": lambda: SamplerStrategy("tpe"),
    "gp": lambda: SamplerStrategy("gp"),
    "random": lambda: SamplerStrategy("random"),
    "exhaustive": Exhaustive,
    "hybrid": Hybrid,
    # The default's model without the additive kernel: cheaper, and the better explorer of a needle.
    "hybrid:joint": lambda: Hybrid(name="hybrid:joint", kernel="joint"),
}

#: The strategy used when none is named (measured against the others by bench/strategy_replay.py).
DEFAULT = "hybrid"


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name`` (``default`` stands for ``DEFAULT``). An Optuna sampler's name may
    carry how it hears of invalid proposals: ``tpe:constraint``, ``tpe:fail`` (see ``INVALID_MODES``)."""
    name = DEFAULT if name == "default" else name
    base, _, mode = name.partition(":")
    if mode and base in ("tpe", "gp", "random"):
        if mode not in INVALID_MODES:
            raise ValueError(f"unknown invalid mode {mode!r}; known: {', '.join(INVALID_MODES)}")
        return SamplerStrategy(base, invalid_mode=mode)
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; known: default, {', '.join(STRATEGIES)}")
    return STRATEGIES[name]()


def search(space: Space[Any], objective: Objective | None, strategy: str | Strategy, budget: Budget,
           **options: Any) -> SearchResult:
    """Run ``strategy`` (a name or a Strategy) on ``space``; ``options`` go to ``run_search`` (an
    ``evaluate`` there stands for the objective, which may then be None)."""
    chosen = get_strategy(strategy) if isinstance(strategy, str) else strategy
    return run_search(space, objective, chosen, budget, **options)


__all__ = [
    "DEFAULT", "STRATEGIES", "Budget", "History", "Objective", "Outcome", "SearchResult", "SpaceExhausted",
    "Strategy", "StudyMismatchError", "TrialRecord", "get_strategy", "search",
]
