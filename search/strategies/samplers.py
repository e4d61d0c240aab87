"""Strategies that are Optuna samplers as they are: ``tpe``, ``gp``, ``random``; and ``exhaustive``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import optuna

from compiler.space import Space
from search.strategies.base import History
from search.strategies.driver import SpaceExhausted


@dataclass(frozen=True)
class SamplerStrategy:
    """An Optuna sampler proposes every point; ``invalid_mode`` is how it hears of invalid ones.

    ``constraint`` by default: marked infeasible, an invalid point is ranked below every measured one
    by any constraint-aware sampler and skipped by ``study.best_trial``. On the replayed A100
    convolution space TPE made the same trials seed by seed with ``prune`` and ``constraint`` (it
    proposes few invalid points: 17 in 200 evaluations), and mixed results with ``fail`` (README).
    """

    name: str
    invalid_mode: str = "constraint"

    def sampler(self, space: Space[Any], seed: int) -> optuna.samplers.BaseSampler:
        if self.name == "tpe":
            return optuna.samplers.TPESampler(seed=seed)
        if self.name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if self.name == "gp":
            try:
                import scipy  # noqa: F401
                import torch  # noqa: F401
            except ImportError as error:
                raise RuntimeError(
                    f"the gp strategy needs torch and scipy: pip install 'warpmap[gp]' ({error})") from error
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.samplers.GPSampler(seed=seed)
        raise ValueError(f"no Optuna sampler named {self.name!r}")

    def propose(self, history: History) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True)
class Exhaustive:
    """Every valid point once, in the space's enumeration order (the space must be enumerable)."""

    name: str = "exhaustive"

    def sampler(self, space: Space[Any], seed: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)

    def propose(self, history: History) -> dict[str, Any] | None:
        space = history.space
        walk = history.scratch.setdefault("walk", space.combinations())
        for values in walk:
            if space.key(values) not in history.taken and space.is_valid(values):
                return values
        raise SpaceExhausted
