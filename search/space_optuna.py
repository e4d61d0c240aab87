"""A schedule space as Optuna sees it: distributions its storage can hold, and the way back.

Categorical parameters become categorical distributions over their storable choices (tuples as JSON
text); ordinal and log2 parameters become integer distributions over the index of their choice, so a
sampler models their order (for powers of two the index is the exponent: a log2 axis). Conditional
parameters are suggested only when active (define-by-run), so a sampler never spends a trial on a
value that changes nothing. Indices are safe to store because a study is resumed only by a space with
the same fingerprint (same choices in the same order).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from compiler.space import Kind, Param, Space


def distribution(param: Param) -> CategoricalDistribution | IntDistribution:
    """The Optuna distribution one parameter is stored under."""
    if param.kind is Kind.CATEGORICAL:
        return CategoricalDistribution(param.storable)
    return IntDistribution(0, len(param.choices) - 1)


def encode(param: Param, value: Any) -> Any:
    """The stored form of one choice (an index for ordered kinds, a storable choice otherwise)."""
    if param.kind is Kind.CATEGORICAL:
        return param.encode(value)
    return param.index(value)


def decode(param: Param, stored: Any) -> Any:
    """The choice a stored value stands for (inverse of ``encode``)."""
    if param.kind is Kind.CATEGORICAL:
        return param.decode(stored)
    return param.choices[int(stored)]


def encode_values(space: Space[Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The stored parameters of a point: only its active parameters, as Optuna holds them."""
    canonical = space.canonical(values)
    return {p.name: encode(p, canonical[p.name]) for p in space.active(canonical)}


def decode_params(space: Space[Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical values of a stored trial's parameters (inactive ones at their first choice)."""
    decoded = {p.name: decode(p, params[p.name]) for p in space.params if p.name in params}
    return space.canonical(decoded)


def suggest(trial: optuna.Trial, space: Space[Any]) -> dict[str, Any]:
    """Ask ``trial`` for every active parameter in declaration order; canonical values come back."""
    values: dict[str, Any] = {}
    for param in space.params:
        if param.when is not None and not param.when.holds(values):
            values[param.name] = param.choices[0]
            continue
        dist = distribution(param)
        if isinstance(dist, CategoricalDistribution):
            stored = trial.suggest_categorical(param.name, dist.choices)
        else:
            stored = trial.suggest_int(param.name, dist.low, dist.high)
        values[param.name] = decode(param, stored)
    return values
