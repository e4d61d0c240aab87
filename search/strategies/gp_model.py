"""A small Gaussian-process model in numpy for the ``hybrid`` strategy (no torch, no scipy).

Matérn 5/2 kernel with one length scale per feature, on standardised targets, over all features at
once (the joint kernel) or additive over the parameters (``kernel``); the length scales, the noise and
the additive kernel's order weights are chosen by the log marginal likelihood over a seeded random
search around the previous choice, which is cheap at the sizes a tuning reaches (a few hundred points).
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


#: The additive kernel's weights (first order, second order, all interactions) a fit chooses among:
#: from the joint kernel alone to a model of single parameters and pairs.
ORDER_WEIGHTS = ((0.0, 0.0, 1.0), (0.1, 0.3, 0.6), (0.2, 0.5, 0.3), (0.3, 0.6, 0.1), (0.1, 0.8, 0.1))


def kernel(a: np.ndarray, b: np.ndarray, lengthscales: np.ndarray, groups: np.ndarray | None = None,
           weights: tuple[float, float, float] | None = None) -> np.ndarray:
    """Matérn 5/2 over all features (``weights`` None), or the additive kernel of Duvenaud et al.
    (2011) over the parameters ``groups`` names: w1 times the mean of the single parameters' kernels,
    plus w2 times the mean over pairs of their products, plus w3 times the joint kernel. A pair's
    effect (block width by height: the threads of a block) is then learnt from every point that
    shares it, whatever the other parameters, which a joint kernel only does between near points."""
    joint = matern52(a, b, lengthscales)
    if weights is None or groups is None or weights[:2] == (0.0, 0.0):
        return joint
    count = int(groups.max()) + 1 if groups.size else 0
    if count < 2:
        return joint
    single = np.stack([matern52(a[:, groups == g], b[:, groups == g], lengthscales[groups == g])
                       for g in range(count)])
    first = single.sum(axis=0)
    # Newton-Girard: the sum over pairs of products from the sum and the sum of squares.
    second = 0.5 * (first * first - (single * single).sum(axis=0))
    w1, w2, w3 = weights
    return w1 * first / count + w2 * second / (count * (count - 1) / 2) + w3 * joint


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
    groups: np.ndarray | None = None
    weights: tuple[float, float, float] | None = None

    @property
    def log_lengthscales(self) -> np.ndarray:
        return np.log(self.lengthscales)

    def k(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return kernel(a, b, self.lengthscales, self.groups, self.weights)

    def predict(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross = self.k(points, self.x)
        mean = cross @ self.alpha
        var = np.maximum(1.0 - ((cross @ self.inverse) * cross).sum(1), 1e-12)
        return mean, np.sqrt(var)

    def sample(self, points: np.ndarray, rng: random.Random) -> np.ndarray:
        """One draw of the values at ``points`` from the joint posterior (Thompson sampling)."""
        cross = self.k(points, self.x)
        mean = cross @ self.alpha
        cov = self.k(points, points) - cross @ self.inverse @ cross.T
        cov = 0.5 * (cov + cov.T) + 1e-6 * np.eye(len(points))
        values, vectors = np.linalg.eigh(cov)
        normal = np.random.default_rng(rng.getrandbits(32)).standard_normal(len(points))
        return mean + vectors @ (np.sqrt(np.maximum(values, 0.0)) * normal)


def _log_likelihood(x: np.ndarray, y: np.ndarray, log_ls: np.ndarray, noise: float,
                    groups: np.ndarray | None = None, weights: tuple[float, float, float] | None = None
                    ) -> tuple[float, Fit | None]:
    ls = np.exp(log_ls)
    k = kernel(x, x, ls, groups, weights) + (noise + 1e-8) * np.eye(len(x))
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return -math.inf, None
    inverse_chol = np.linalg.inv(chol)
    inverse = inverse_chol.T @ inverse_chol
    alpha = inverse @ y
    value = -0.5 * float(y @ alpha) - float(np.log(np.diag(chol)).sum())
    return value, Fit(x, alpha, inverse, ls, noise, groups, weights)


def fit(x: np.ndarray, y: np.ndarray, rng: random.Random, previous: np.ndarray | None, tries: int = 24,
        groups: np.ndarray | None = None, previous_weights: tuple[float, float, float] | None = None) -> Fit:
    """The best model of ``tries`` hyperparameter choices (``y`` standardised by the caller). With
    ``groups``, the additive kernel, its order weights chosen among ``ORDER_WEIGHTS`` with the rest."""
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
        weights = None
        if groups is not None:
            weights = previous_weights if i == 0 and previous_weights else ORDER_WEIGHTS[i % len(ORDER_WEIGHTS)]
        value, model = _log_likelihood(x, y, log_ls, noise, groups, weights)
        if model is not None and value > best_value:
            best_value, best_fit = value, model
    if best_fit is None:  # every choice was singular: a very noisy model still ranks points
        _, best_fit = _log_likelihood(x, y, start, 0.5)
    assert best_fit is not None
    return best_fit


#: The log-normal prior on each length scale (centre, spread): a mild pull towards smooth models,
#: which keeps a fit on a few dozen points from explaining them with length scales near zero.
_PRIOR = (math.log(0.5), 1.5)


def _objective(x: np.ndarray, y: np.ndarray, sq: np.ndarray, theta: np.ndarray) -> tuple[float, np.ndarray, Fit | None]:
    """Log marginal likelihood plus log prior of ``theta`` (log length scales, log noise), its gradient."""
    dims = x.shape[1]
    ls, noise = np.exp(theta[:dims]), math.exp(theta[dims])
    scaled = sq / (ls * ls)  # (n, n, dims)
    r = np.sqrt(np.maximum(scaled.sum(axis=2), 0.0))
    decay = np.exp(-_SQRT5 * r)
    k = (1.0 + _SQRT5 * r + (5.0 / 3.0) * r * r) * decay + (noise + 1e-8) * np.eye(len(x))
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return -math.inf, np.zeros_like(theta), None
    inverse_chol = np.linalg.inv(chol)
    inverse = inverse_chol.T @ inverse_chol
    alpha = inverse @ y
    centre, spread = _PRIOR
    prior = -0.5 * float((((theta[:dims] - centre) / spread) ** 2).sum())
    value = -0.5 * float(y @ alpha) - float(np.log(np.diag(chol)).sum()) + prior
    inner = np.outer(alpha, alpha) - inverse
    # dK/dlog(l_d) = (5/3)(1 + sqrt5 r) exp(-sqrt5 r) * scaled_d: no singularity at r = 0.
    shape = (5.0 / 3.0) * (1.0 + _SQRT5 * r) * decay * inner
    grad = np.empty_like(theta)
    grad[:dims] = 0.5 * np.einsum("ij,ijd->d", shape, scaled) - (theta[:dims] - centre) / spread**2
    grad[dims] = 0.5 * noise * float(np.trace(inner))
    return value, grad, Fit(x, alpha, inverse, ls, noise)


def fit_map(x: np.ndarray, y: np.ndarray, rng: random.Random, previous: Fit | None, steps: int = 30,
            starts: int = 6, refit: bool = True) -> Fit:
    """The model at the most probable length scales and noise (``y`` standardised by the caller):
    gradient ascent (Adam) on the log marginal likelihood with a log-normal prior on the length
    scales, from the best of a few seeded starting points (the previous choice among them). With
    ``refit`` false, the previous model's length scales and noise on the new data (one factorisation)."""
    dims = x.shape[1]
    low, high = _LOG_LS_RANGE
    sq = (x[:, None, :] - x[None, :, :]) ** 2
    if previous is not None and len(previous.lengthscales) == dims:
        start = np.concatenate([np.log(previous.lengthscales), [math.log(previous.noise)]])
    else:
        start = np.concatenate([np.full(dims, math.log(0.5)), [math.log(1e-2)]])
    if not refit:
        model = _objective(x, y, sq, start)[2]
        if model is not None:
            return model
    candidates = [start]
    for _ in range(starts - 1):
        candidates.append(np.array([rng.uniform(low, high) for _ in range(dims)] + [math.log(rng.choice(_NOISES))]))
    scored = sorted(((_objective(x, y, sq, c)[0], i) for i, c in enumerate(candidates)), reverse=True)
    bounds_low = np.array([low] * dims + [math.log(1e-6)])
    bounds_high = np.array([high] * dims + [math.log(0.5)])
    best_value, best_fit = -math.inf, None
    for _, index in scored[:1]:
        theta = candidates[index].copy()
        moment, second = np.zeros_like(theta), np.zeros_like(theta)
        for step in range(1, steps + 1):
            value, grad, model = _objective(x, y, sq, theta)
            if model is not None and value > best_value:
                best_value, best_fit = value, model
            if model is None:
                break
            moment = 0.9 * moment + 0.1 * grad
            second = 0.999 * second + 0.001 * grad * grad
            update = (moment / (1 - 0.9**step)) / (np.sqrt(second / (1 - 0.999**step)) + 1e-8)
            theta = np.clip(theta + 0.1 * update, bounds_low, bounds_high)
    if best_fit is None:
        return fit(x, y, rng, None)
    return best_fit
