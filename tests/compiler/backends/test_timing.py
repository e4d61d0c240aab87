"""The timing protocol's logic, driven by a fake clock: no assertion here depends on real speed."""

import pytest

from compiler.backends.timing import Protocol, Samples, measure, measure_each, percentile

MS = 1_000_000


class FakeKernel:
    """A callable whose every call advances a fake clock by the next duration (the last one repeats)."""

    def __init__(self, durations_ns):
        self.now = 0
        self.calls = 0
        self.durations = list(durations_ns)
        self.events = []

    def clock(self):
        return self.now

    def __call__(self):
        self.now += self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1
        self.events.append("call")

    def flush(self):
        self.now += 1000 * MS  # flushing is slow, and must never be counted in a sample
        self.events.append("flush")


def test_warm_up_runs_by_time_then_repetitions_reach_the_minimum():
    fake = FakeKernel([2 * MS])
    samples = measure(fake, Protocol(warmup_ms=10, min_repetitions=4, target_ms=0), clock=fake.clock)
    assert samples.samples_ns == (2 * MS,) * 4
    assert fake.calls == 5 + 4  # 10 ms of 2 ms calls, then the four timed ones


def test_repetitions_continue_until_the_target_time():
    fake = FakeKernel([MS])
    samples = measure(fake, Protocol(warmup_ms=0, min_repetitions=2, target_ms=30), clock=fake.clock)
    assert len(samples.samples_ns) == 30


def test_the_repetition_cap_wins_over_the_target():
    fake = FakeKernel([MS])
    protocol = Protocol(warmup_ms=0, min_repetitions=1, target_ms=10_000, max_repetitions=7)
    assert len(measure(fake, protocol, clock=fake.clock).samples_ns) == 7


def test_a_warm_up_always_calls_once_even_when_it_is_zero():
    fake = FakeKernel([5 * MS, MS])
    samples = measure(fake, Protocol(warmup_ms=0, min_repetitions=3, target_ms=0), clock=fake.clock)
    assert samples.samples_ns == (MS, MS, MS)  # the slow first call is not a sample


def test_flushes_come_before_each_repetition_outside_the_timed_region():
    fake = FakeKernel([MS])
    protocol = Protocol(warmup_ms=0, min_repetitions=3, target_ms=0, flush_caches=True)
    samples = measure(fake, protocol, flush=fake.flush, clock=fake.clock)
    assert samples.samples_ns == (MS,) * 3
    assert fake.events == ["call", "flush", "call", "flush", "call", "flush", "call"]


def test_a_flushing_protocol_needs_a_flush():
    with pytest.raises(ValueError, match="no flush"):
        measure(lambda: None, Protocol(flush_caches=True))


def test_median_and_percentiles_of_the_raw_samples():
    samples = Samples((50, 10, 40, 20, 30), Protocol())
    assert (samples.p20_ns, samples.median_ns, samples.p80_ns) == (18.0, 30.0, 42.0)
    assert samples.median_s == pytest.approx(30e-9)


@pytest.mark.parametrize("bad", [{"min_repetitions": 0}, {"min_repetitions": 5, "max_repetitions": 4},
                                 {"warmup_ms": -1}])
def test_an_impossible_protocol_is_refused(bad):
    with pytest.raises(ValueError, match="Protocol: "):
        Protocol(**bad)


def test_percentile_bounds():
    assert percentile([3, 1, 2], 0) == 1.0 and percentile([3, 1, 2], 100) == 3.0
    with pytest.raises(ValueError, match="need values"):
        percentile([], 50)


def test_measure_each_records_what_the_call_reports_and_paces_warm_up_by_the_clock() -> None:
    now = [0]
    reported = iter(range(1, 1000))

    def timed() -> int:  # each call takes 1 ms of wall time and reports its own (growing) measure
        now[0] += 1_000_000
        return next(reported)

    flushes: list[int] = []
    samples = measure_each(timed, Protocol(warmup_ms=3, min_repetitions=4, target_ms=0, flush_caches=True),
                           flush=lambda: flushes.append(now[0]), clock=lambda: now[0])
    assert samples.samples_ns == (4, 5, 6, 7)  # three warm-up calls reach 3 ms, then four repetitions
    assert len(flushes) == 4
