"""A small Gaussian-process model in numpy for the ``hybrid`` strategy (no torch, no scipy).

Matérn 5/2 kernel with one length scale per feature, on standardised targets; the length scales and
the noise are chosen by the log marginal likelihood over a seeded random search around the previous
choice, which is cheap at the sizes a tuning reaches (a few hundred points).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

_SQRT5 = math.sqrt(5.0)
_LOG_LS_RANGE = (math.log(0.03), math.log(4.0))
_NOISES = (1e-4, 1e-3, 1e-2, 5e-2)


def _sqdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d, 0.0)


def matern52(a: np.ndarray, b: np.ndarray, lengthscales: np.ndarray) -> np.ndarray:
    r = np.sqrt(_sqdist(a / lengthscales, b / lengthscales))
    return (1.0 + _SQRT5 * r + (5.0 / 3.0) * r * r) * np.exp(-_SQRT5 * r)


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz and Stegun 7.1.26: absolute error below 1.5e-7, plenty for an acquisition function.
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-x * x))


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """Expected amount by which a point's value falls below ``best`` (minimisation)."""
    std = np.maximum(std, 1e-9)
    z = (best - mean) / std
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return (best - mean) * cdf + std * pdf


@dataclass(frozen=True)
class Fit:
    """A fitted model: predicts mean and standard deviation of standardised targets."""

    x: np.ndarray
    alpha: np.ndarray
    inverse: np.ndarray
    lengthscales: np.ndarray
    noise: float

    def predict(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross = matern52(points, self.x, self.lengthscales)
        mean = cross @ self.alpha
        var = np.maximum(1.0 - ((cross @ self.inverse) * cross).sum(1), 1e-12)
        return mean, np.sqrt(var)


def _log_likelihood(x: np.ndarray, y: np.ndarray, log_ls: np.ndarray, noise: float) -> tuple[float, Fit | None]:
    ls = np.exp(log_ls)
    k = matern52(x, x, ls) + (noise + 1e-8) * np.eye(len(x))
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return -math.inf, None
    inverse_chol = np.linalg.inv(chol)
    inverse = inverse_chol.T @ inverse_chol
    alpha = inverse @ y
    value = -0.5 * float(y @ alpha) - float(np.log(np.diag(chol)).sum())
    return value, Fit(x, alpha, inverse, ls, noise)


def fit(x: np.ndarray, y: np.ndarray, rng: random.Random, previous: np.ndarray | None, tries: int = 24) -> Fit:
    """The best model of ``tries`` hyperparameter choices (``y`` standardised by the caller)."""
    dims = x.shape[1]
    low, high = _LOG_LS_RANGE
    start = previous if previous is not None else np.full(dims, math.log(0.5))
    best_value, best_fit = -math.inf, None
    for i in range(tries):
        if i == 0:
            log_ls = start
        elif i % 3 == 0:
            log_ls = np.array([rng.uniform(low, high) for _ in range(dims)])
        else:
            log_ls = np.clip(start + np.array([rng.gauss(0.0, 0.6) for _ in range(dims)]), low, high)
        noise = _NOISES[i % len(_NOISES)]
        value, model = _log_likelihood(x, y, log_ls, noise)
        if model is not None and value > best_value:
            best_value, best_fit = value, model
    if best_fit is None:  # every choice was singular: a very noisy model still ranks points
        _, best_fit = _log_likelihood(x, y, start, 0.5)
    assert best_fit is not None
    return best_fit
