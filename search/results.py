"""What a tuning reports: each evaluated candidate (``Trial``), its progress after each one (``Progress``),
and the best it found with the figures that stand on it (``TuneResult``); ``TuneError`` when nothing was
both correct and timed. ``search.tune`` makes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compiler.backends import Artifact
from compiler.backends.timing import Samples
from compiler.roofline import Roofline, roofline
from search.trial import TrialStatus


@dataclass(frozen=True)
class Trial:
    """One evaluated candidate with everything measured about it (what a sink stores)."""

    number: int
    values: Mapping[str, Any]
    status: TrialStatus
    message: str = ""
    compile_s: float = 0.0
    samples: Samples | None = None
    error: float | None = None
    resources: tuple[Mapping[str, Any], ...] = ()
    artifact_key: str | None = None

    @property
    def latency_ms(self) -> float | None:
        return self.samples.median_ns / 1e6 if self.samples is not None else None


@dataclass(frozen=True)
class Progress:
    """What ``on_progress`` is told after each trial."""

    done: int
    budget_trials: int | None
    counts: Mapping[str, int]
    best_ms: float | None
    elapsed_s: float

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the pace so far, once a trial has ended and when the budget counts trials."""
        if self.budget_trials is None or self.done <= 0:
            return None
        return self.elapsed_s / self.done * max(self.budget_trials - self.done, 0)


@dataclass(frozen=True)
class TuneResult:
    """The best schedule of a tuning, its artifact and figures, and every trial."""

    spec: Mapping[str, Any]
    target: str
    values: Mapping[str, Any]
    artifact: Artifact
    samples: Samples
    flops: int
    min_bytes: int
    peak_gflops: float | None
    trials: tuple[Trial, ...]
    stopped: str
    study: str
    retimed: Mapping[str, float] = field(default_factory=dict)
    #: Whether ``peak_gflops`` was measured on the target (the cpu) or estimated from its description.
    peak_measured: bool = False
    #: GB/s at which the target moves ``min_bytes`` (the roofline's slope), when known; measured or not
    #: as ``peak_measured`` says of the peak.
    bandwidth_gbs: float | None = None
    bandwidth_measured: bool = False

    @property
    def latency_ms(self) -> float:
        return self.samples.median_ns / 1e6

    @property
    def gflops(self) -> float:
        return self.flops / self.samples.median_ns

    @property
    def gbs(self) -> float:
        return self.min_bytes / self.samples.median_ns

    @property
    def peak_fraction(self) -> float | None:
        """GFLOP/s over the target's compute peak (its roofline's flat part), when the peak is known."""
        return self.gflops / self.peak_gflops if self.peak_gflops else None

    @property
    def roofline(self) -> Roofline | None:
        """Where the best stands against the roofs (``compiler.roofline``); None unless both are known."""
        return roofline(self.gflops, self.gbs, self.peak_gflops, self.bandwidth_gbs)

    @property
    def bound(self) -> str | None:
        """Which roof binds this workload: ``"compute"`` or ``"memory"`` (None unless both are known)."""
        return None if self.roofline is None else self.roofline.bound

    @property
    def roofline_fraction(self) -> float | None:
        """The roofline's least time for this workload over the measured median: 1 is as fast as the
        roofs allow (None unless both are known)."""
        return None if self.roofline is None else self.roofline.fraction


class TuneError(RuntimeError):
    """No candidate of the space was both correct and timed: there is no result to report."""
