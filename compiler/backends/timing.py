"""The timing protocol every target follows, as pure code over a callable and a clock.

1. Warm-up by time: call the kernel until ``warmup_ms`` have passed (at least once), so first-touch
   page faults, thread-pool start-up and frequency ramps are spent before anything is recorded.
2. Repetitions: time one call at a time until at least ``min_repetitions`` samples are taken and
   their sum reaches ``target_ms``, but never more than ``max_repetitions``.
3. When the protocol asks for cold caches, ``flush`` is called before each repetition, outside the
   timed region (on the cpu: writing a buffer larger than the last-level cache).

Each sample is the monotonic clock's difference around one call (``time.perf_counter_ns`` unless
another clock is given; tests pass a fake one). ``Samples`` keeps every raw sample and reports the
median and the 20th and 80th percentiles.

Example with a fake clock, where every call takes 4 ms::

    >>> now = [0]
    >>> def kernel(): now[0] += 4_000_000
    >>> samples = measure(kernel, Protocol(warmup_ms=10, min_repetitions=3, target_ms=20),
    ...                   clock=lambda: now[0])
    >>> len(samples.samples_ns), samples.median_ns
    (5, 4000000.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Clock = Callable[[], int]


@dataclass(frozen=True)
class Protocol:
    """How a kernel is timed. The defaults: 50 ms of warm-up, then at least 10 repetitions and about
    100 ms of timed calls, at most 10 000, caches left warm."""

    warmup_ms: float = 50.0
    min_repetitions: int = 10
    target_ms: float = 100.0
    max_repetitions: int = 10_000
    flush_caches: bool = False

    def __post_init__(self) -> None:
        if self.warmup_ms < 0 or self.target_ms < 0:
            raise ValueError(f"Protocol: warm-up and target times must be >= 0 ms, got {self}")
        if not 1 <= self.min_repetitions <= self.max_repetitions:
            raise ValueError(f"Protocol: need 1 <= min_repetitions <= max_repetitions, got {self}")


DEFAULT_PROTOCOL = Protocol()


@dataclass(frozen=True)
class Samples:
    """Raw per-call times in nanoseconds, in the order taken, and the protocol that took them."""

    samples_ns: tuple[int, ...]
    protocol: Protocol

    def __post_init__(self) -> None:
        if not self.samples_ns:
            raise ValueError("Samples: at least one sample is needed")

    @property
    def median_ns(self) -> float:
        return percentile(self.samples_ns, 50)

    @property
    def p20_ns(self) -> float:
        return percentile(self.samples_ns, 20)

    @property
    def p80_ns(self) -> float:
        return percentile(self.samples_ns, 80)

    @property
    def median_s(self) -> float:
        return self.median_ns * 1e-9


def percentile(values: Sequence[int | float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, interpolated linearly between ranks.

    >>> percentile([1, 2, 3, 4], 50), percentile([10], 80), percentile([1, 2, 3, 4, 5, 6], 20)
    (2.5, 10.0, 2.0)
    """
    if not values or not 0 <= q <= 100:
        raise ValueError(f"percentile: need values and 0 <= q <= 100, got {len(values)} values, q={q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def measure(call: Callable[[], object], protocol: Protocol | None = None, *,
            flush: Callable[[], object] | None = None, clock: Clock = time.perf_counter_ns) -> Samples:
    """Time ``call`` under ``protocol`` (``DEFAULT_PROTOCOL`` when None) with ``clock`` around each call;
    ``flush`` is required when the protocol flushes caches."""

    def timed() -> int:
        before = clock()
        call()
        return clock() - before

    return measure_each(timed, protocol, flush=flush, clock=clock)


def measure_each(timed: Callable[[], int], protocol: Protocol | None = None, *,
                 flush: Callable[[], object] | None = None, clock: Clock = time.perf_counter_ns) -> Samples:
    """The protocol over ``timed``, a call that runs the kernel once and returns how long it took in ns
    by its own measure (CUDA events on the GPU); ``clock`` paces the warm-up only."""
    protocol = protocol or DEFAULT_PROTOCOL
    if protocol.flush_caches and flush is None:
        raise ValueError("measure: the protocol flushes caches but no flush was given")
    warmup_ns = protocol.warmup_ms * 1e6
    start = clock()
    timed()
    while clock() - start < warmup_ns:
        timed()
    samples: list[int] = []
    total = 0
    target_ns = protocol.target_ms * 1e6
    while len(samples) < protocol.max_repetitions and (
            len(samples) < protocol.min_repetitions or total < target_ns):
        if protocol.flush_caches:
            assert flush is not None
            flush()
        elapsed = timed()
        samples.append(elapsed)
        total += elapsed
    return Samples(tuple(samples), protocol)
