"""Task mappings: Hidet 0.6.1 golden data, Hidet's documented examples, errors, value semantics."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.mapping import (
    ComposedMapping,
    LoopAttr,
    ProjectedMapping,
    RepeatMapping,
    SpatialMapping,
    SymbolicWorker,
    TaskMapping,
    auto_map,
    parse_loop_attrs,
    repeat,
    spatial,
    strides_from_ranks,
)

GOLDEN = json.loads((Path(__file__).parent / "data" / "hidet_mappings.json").read_text())


def build(desc: dict[str, Any]) -> TaskMapping:
    """Rebuild a mapping from the fixture's description tree (the same tree the fixture built in Hidet)."""
    op = desc["op"]
    if op == "spatial":
        return spatial(*desc["shape"], ranks=desc.get("ranks"))
    if op == "repeat":
        return repeat(*desc["shape"], ranks=desc.get("ranks"), attrs=desc.get("attrs"))
    if op == "auto_map":
        return auto_map(*desc["shape"], workers=desc["workers"], ranks=desc.get("ranks"))
    if op == "mul":
        return build(desc["outer"]) * build(desc["inner"])
    if op == "project":
        return build(desc["base"]).projection({int(k): v for k, v in desc["dim2value"].items()})
    raise AssertionError(f"unknown op {op}")


def tasks_of(m: TaskMapping) -> list[list[tuple[int, ...]]]:
    return [m.worker2task(w) for w in range(m.num_workers)]


# --- golden data from hidet.ir.mapping ---------------------------------------------------------------


def test_fixture_is_from_hidet_and_varied() -> None:
    assert "hidet 0.6.1" in GOLDEN["source"]
    assert len(GOLDEN["cases"]) >= 40


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=[c["name"] for c in GOLDEN["cases"]])
def test_matches_hidet(case: dict[str, Any]) -> None:
    m = build(case["desc"])
    assert m.num_workers == case["num_workers"]
    assert m.task_shape == tuple(case["task_shape"])
    for w, expected in zip(case["workers"], case["tasks"], strict=True):
        assert m.worker2task(w) == [tuple(t) for t in expected], f"worker {w} of {m!r}"
    if case["all_workers"]:
        assert case["workers"] == list(range(m.num_workers))
    if "auto_parts" in case:
        assert isinstance(m, ComposedMapping)
        assert m.outer.task_shape == tuple(case["auto_parts"]["repeat"])
        assert m.inner.task_shape == tuple(case["auto_parts"]["spatial"])
    if "loop_attrs" in case:
        assert isinstance(m, RepeatMapping)
        assert [str(a) for a in m.attrs] == case["loop_attrs"]


@pytest.mark.parametrize("case", GOLDEN["loop_attrs"], ids=lambda c: f"{c['text']!r}x{c['num_loops']}")
def test_loop_attrs_parse_like_hidet(case: dict[str, Any]) -> None:
    assert [str(a) for a in parse_loop_attrs(case["text"], case["num_loops"])] == case["attrs"]


def test_loop_attr_defaults_like_hidet() -> None:
    for case in GOLDEN["loop_attr_defaults"]:
        assert str(LoopAttr.for_extent(case["extent"])) == case["attr"]
        assert str(repeat(case["extent"]).attrs[0]) == case["attr"]


@pytest.mark.parametrize("case", GOLDEN["loop_attr_errors"], ids=lambda c: repr(c["text"]))
def test_loop_attr_errors_like_hidet(case: dict[str, Any]) -> None:
    assert case["error"] == "ValueError"
    with pytest.raises(ValueError, match="loop attrs"):
        parse_loop_attrs(case["text"], case["num_loops"])


# --- Hidet's documented examples ---------------------------------------------------------------------


def test_spatial_2_3() -> None:
    m = spatial(2, 3)
    assert (m.num_workers, m.task_shape) == (6, (2, 3))
    assert tasks_of(m) == [[(0, 0)], [(0, 1)], [(0, 2)], [(1, 0)], [(1, 1)], [(1, 2)]]
    assert m.strides == (3, 1)


def test_repeat_times_spatial() -> None:
    m = repeat(2, 2) * spatial(2, 2)
    assert (m.num_workers, m.task_shape) == (4, (4, 4))
    assert m.worker2task(0) == [(0, 0), (0, 2), (2, 0), (2, 2)]
    assert m.worker2task(3) == [(1, 1), (1, 3), (3, 1), (3, 3)]
    assert tasks_of(spatial(2, 2).repeat(2, 2))[1] == [(0, 2), (0, 3), (1, 2), (1, 3)]


def test_column_major_ranks() -> None:
    column_major = [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert [t for [t] in tasks_of(spatial(2, 3, ranks=[1, 0]))] == column_major
    assert repeat(2, 3, ranks=[1, 0]).worker2task(0) == column_major
    assert spatial(2, 3, ranks=[1, 0]).strides == (1, 2)
    assert strides_from_ranks((2, 3, 4), (1, 2, 0)) == (3, 1, 6)  # checked against Hidet


@pytest.mark.parametrize(
    ("shape", "workers", "ranks", "expected"),
    [
        ((8, 32), 64, None, repeat(4, 1).spatial(2, 32)),
        ((8, 64), 64, None, repeat(8, 1).spatial(1, 64)),
        ((8, 96), 64, None, repeat(4, 3).spatial(2, 32)),
        ((8, 128), 64, None, repeat(8, 2).spatial(1, 64)),
        ((8, 16, 24), 32, None, repeat(8, 4, 3).spatial(1, 4, 8)),
        # Hidet's docstring drops the ranks, but auto_map passes them on to both parts.
        ((8, 96), 64, [1, 0], repeat(1, 12, ranks=[1, 0]).spatial(8, 8, ranks=[1, 0])),
        ((64, 8), 64, [1, 0], repeat(1, 8, ranks=[1, 0]).spatial(64, 1, ranks=[1, 0])),
    ],
)
def test_auto_map_docstring_examples(shape, workers, ranks, expected) -> None:
    m = auto_map(*shape, workers=workers, ranks=ranks)
    assert m == expected
    assert m.num_workers == workers
    assert tasks_of(m) == tasks_of(expected)


def test_auto_map_docstring_without_ranks_differs() -> None:
    # The literal docstring form repeat(1, 12).spatial(8, 8) is row-major, Hidet's result is not.
    assert tasks_of(auto_map(8, 96, workers=64, ranks=[1, 0])) != tasks_of(repeat(1, 12).spatial(8, 8))


def test_matmul_block_mapping() -> None:
    m = spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4)
    assert (m.num_workers, m.task_shape) == (256, (128, 128))
    assert m.worker2task(0)[:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    # worker 9: warp (0, 0), lane (1, 1) of spatial(4, 8); warp repeats (b, d), thread repeats (i, j)
    expected = [
        (b * 16 + 4 + i, d * 32 + 4 + j)
        for b in range(2)
        for d in range(2)
        for i in range(4)
        for j in range(4)
    ]
    assert m.worker2task(9) == expected


def test_projection() -> None:
    m = spatial(2, 3).repeat(1, 2).projection({1: 0})
    assert (m.num_workers, m.task_shape) == (6, (2, 1))
    assert m.worker2task(4) == [(1, 0), (1, 0)]
    assert isinstance(m, ProjectedMapping) and m.dim2value == ((1, 0),)


# --- integer and symbolic workers --------------------------------------------------------------------


def test_workers_past_the_end_are_idle() -> None:
    m = spatial(4, 8).repeat(2, 2)
    assert m.worker2task(32) == [] and m.worker2task(1000) == []
    assert list(m.on(5)) == m.worker2task(5)


@pytest.mark.parametrize("w", [-1, 1.0, True, "3", None])
def test_non_int_or_negative_worker(w: object) -> None:
    with pytest.raises(ValueError, match="worker"):
        spatial(4).worker2task(w)  # type: ignore[arg-type]


def test_on_delegates_to_symbolic_worker() -> None:
    class ThreadIdx:
        def map_tasks(self, mapping: TaskMapping) -> Iterator[tuple[Any, ...]]:
            yield ("lowered", mapping)

    m = repeat(2, 2) * spatial(2, 2)
    assert isinstance(ThreadIdx(), SymbolicWorker)
    assert list(m.on(ThreadIdx())) == [("lowered", m)]
    with pytest.raises(ValueError, match="float"):
        m.on(1.5)  # type: ignore[arg-type]


# --- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: spatial(2, 3) * repeat(4), r"different rank: \(2, 3\).*\(4,\)"),
        (lambda: spatial(2, 3).repeat(2, 2, 2), r"\(2, 3\).*\(2, 2, 2\)"),
        (lambda: spatial(2, 0), r"\(2, 0\)"),
        (lambda: repeat(-1), r"\(-1,\)"),
        (lambda: spatial(2.0, 3), r"\(2\.0, 3\)"),
        (lambda: spatial(2, 3, ranks=[0, 0]), r"ranks \[0, 0\].*\(2, 3\)"),
        (lambda: spatial(2, 3, ranks=[0, 2]), r"ranks \[0, 2\]"),
        (lambda: repeat(2, 3, ranks=[0]), r"ranks \[0\]"),
        (lambda: repeat(2, 3, attrs="u.u"), "3 attributes for 2 loops"),
        (lambda: repeat(2, 3, attrs="p"), "invalid loop attrs 'p'"),
        (lambda: repeat(2, 3, attrs=(LoopAttr(), LoopAttr())), "must be a string"),
        (lambda: RepeatMapping((2, 3), (0, 1), (LoopAttr(),)), r"\(2, 3\) needs 2 LoopAttrs"),
        (lambda: auto_map(8, 41, workers=64), r"\(8, 41\): 328 tasks.*64 workers"),
        (lambda: auto_map(8, 8, workers=0), "workers"),
        (lambda: auto_map(8, 8, workers=4, ranks=[1, 1]), r"ranks \[1, 1\]"),
        (lambda: spatial(2, 3).projection({2: 0}), r"dims \[2\].*\(2, 3\)"),
        (lambda: spatial(2, 3).projection({0: 1}), r"must be 0.*\(2, 3\)"),
        (lambda: strides_from_ranks((2, 3), (1,)), r"ranks \[1\]"),
        (lambda: LoopAttr(unroll=False, factor=2), "factor"),
        (lambda: LoopAttr(unroll=True, factor=0), "factor"),
        (lambda: LoopAttr(unroll=True, factor=2, explicit=True), "explicit"),
    ],
)
def test_bad_use_raises_value_error(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_composing_with_a_non_mapping_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        spatial(2) * 3  # type: ignore[operator]


# --- value semantics ---------------------------------------------------------------------------------


def test_repr() -> None:
    assert repr(spatial(4, 8).repeat(2, 2)) == "spatial(4, 8).repeat(2, 2)"
    assert repr(repeat(2, 2, ranks=[1, 0]) * spatial(2, 2)) == "repeat(2, 2, ranks=[1, 0]).spatial(2, 2)"
    assert repr(repeat(4, 8, attrs="u+u2")) == "repeat(4, 8, attrs='u+u2')"
    assert repr(repeat(2, 8, attrs="u+.")) == "repeat(2, 8)"  # the defaults are not spelled out
    assert repr(spatial(2) * (repeat(2) * spatial(3))) == "spatial(2) * (repeat(2).spatial(3))"
    assert repr(spatial(2).repeat(2).projection({0: 0})) == "spatial(2).repeat(2).projection({0: 0})"
    nested = spatial(2) * (repeat(2) * spatial(3))
    assert repr(nested.repeat(1)) == "(spatial(2) * (repeat(2).spatial(3))).repeat(1)"
    assert repr(nested.projection({0: 0})) == "(spatial(2) * (repeat(2).spatial(3))).projection({0: 0})"
    assert repr(spatial(2) * spatial(4).projection({0: 0})) == "spatial(2) * spatial(4).projection({0: 0})"


def test_equality_hashing_and_immutability() -> None:
    a = spatial(4, 8).repeat(2, 2)
    b = spatial(4, 8) * repeat(2, 2, attrs="u+")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert spatial(2, 3) == spatial(2, 3, ranks=(0, 1)) != spatial(2, 3, ranks=[1, 0])
    assert repeat(2, 2) != repeat(2, 2, attrs="u") and spatial(2) != repeat(2)
    assert SpatialMapping([2, 3], [1, 0]) == spatial(2, 3, ranks=[1, 0])  # lists are normalised to tuples
    assert spatial(2).projection({0: 0}) == ProjectedMapping(spatial(2), {0: 0})  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.outer = spatial(1, 1)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spatial(2).shape = (3,)  # type: ignore[misc]


def test_loop_attrs() -> None:
    assert parse_loop_attrs("u+ . u16", 3) == (LoopAttr(True, None, True), LoopAttr(), LoopAttr(True, 16))
    assert parse_loop_attrs("", 3) == (LoopAttr(),) * 3  # unlike attrs=None, which unrolls short loops
    assert repeat(2, 2, attrs="").attrs == (LoopAttr(), LoopAttr())
    assert repeat(2, 2).attrs == (LoopAttr(unroll=True, explicit=True),) * 2


# --- properties over random chains -------------------------------------------------------------------


@st.composite
def chains(draw: st.DrawFn, ndim: int | None = None, max_cells: int = 1000) -> TaskMapping:
    """Chains of 1-4 spatial/repeat leaves nested either way, at most ``max_cells`` tasks in all."""
    ndim = ndim or draw(st.integers(1, 3))
    m: TaskMapping | None = None
    for _ in range(draw(st.integers(1, 4))):
        shape = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
        ranks = draw(st.permutations(range(ndim)))
        leaf = spatial(*shape, ranks=ranks) if draw(st.booleans()) else repeat(*shape, ranks=ranks)
        if m is not None and math.prod(m.task_shape) * math.prod(shape) > max_cells:
            break
        m = leaf if m is None else (m * leaf if draw(st.booleans()) else leaf * m)
    assert m is not None
    if draw(st.booleans()):
        dims = draw(st.sets(st.integers(0, ndim - 1), max_size=ndim))
        m = m.projection(dict.fromkeys(dims, 0))
    return m


@settings(max_examples=150, deadline=None)
@given(chains())
def test_every_task_covered_equally(m: TaskMapping) -> None:
    counts = Counter(t for w in range(m.num_workers) for t in m.worker2task(w))
    cells = math.prod(m.task_shape)
    assert len(counts) == cells  # every task of the task shape, nothing outside it
    assert all(all(0 <= i < e for i, e in zip(t, m.task_shape, strict=True)) for t in counts)
    base = m.base if isinstance(m, ProjectedMapping) else m
    assert set(counts.values()) == {math.prod(base.task_shape) // cells}  # once, or once per pinned cell
    per_worker = {len(m.worker2task(w)) for w in range(m.num_workers)}
    assert len(per_worker) == 1
    assert sum(counts.values()) == m.num_workers * per_worker.pop()


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(*[chains(ndim=n, max_cells=8)] * 3)))
def test_composition_multiplies_and_associates(abc: tuple[TaskMapping, TaskMapping, TaskMapping]) -> None:
    a, b, c = abc
    m = a * b
    assert m.num_workers == a.num_workers * b.num_workers
    assert m.task_shape == tuple(x * y for x, y in zip(a.task_shape, b.task_shape, strict=True))
    assert tasks_of((a * b) * c) == tasks_of(a * (b * c))


@given(chains(ndim=2, max_cells=16), chains(ndim=3, max_cells=16))
def test_composing_different_ranks_names_both_shapes(a: TaskMapping, b: TaskMapping) -> None:
    with pytest.raises(ValueError, match=f"different rank: {re.escape(str(a.task_shape))}"):
        a * b


@settings(max_examples=150, deadline=None)
@given(chains())
def test_repr_evaluates_back(m: TaskMapping) -> None:
    assert eval(repr(m), {"spatial": spatial, "repeat": repeat}) == m
