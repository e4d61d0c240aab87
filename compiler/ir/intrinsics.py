"""Value-producing functions of the kernel language: casts, selects, logic, math, shuffles, vectors.

Calls carry an abstract name (``"exp"``, ``"shfl_xor"``); each codegen dialect spells it for its target
(``expf``, ``__shfl_xor_sync``). Extern device functions (the ``wm_*`` wrappers) keep their own name and
bring their header along.
"""

from __future__ import annotations

from typing import Any

from compiler.ir.expr import Call, Cast, Expr, Lane, MakeVector, Select, Unary, as_expr, binary
from compiler.ir.types import DataType, PointerType, Type, VectorType, bf16, boolean, f16, f32, i32, u32, vec, void

#: Header of the tensor-core and async-copy wrappers.
PRIMS_HEADER = "warpmap/prims.cuh"
FULL_MASK = 0xFFFFFFFF


def cast(value: Any, dtype: DataType) -> Expr:
    """``value`` converted to ``dtype`` (``(float)x``, ``__float2half_rn(x)`` ...); a no-op if equal."""
    expr = as_expr(value)
    if not isinstance(expr.type, DataType):
        raise TypeError(f"cannot cast {expr!r} of type {expr.type} to {dtype}")
    return expr if expr.type == dtype else Cast(expr, dtype)


def as_condition(cond: Any, what: str) -> Expr:
    expr = as_expr(cond)
    if expr.type != boolean:
        raise TypeError(f"{what} needs a bool condition, got {expr!r} of type {expr.type}")
    return expr


def select(cond: Any, then: Any, otherwise: Any) -> Expr:
    """``cond ? then : otherwise`` (a literal branch takes the type of the other)."""
    condition = as_condition(cond, "select")
    a = as_expr(then, otherwise.type if isinstance(otherwise, Expr) else None)
    b = as_expr(otherwise, a.type)
    if a.type != b.type:
        raise TypeError(f"select branches differ in type: {a!r} is {a.type}, {b!r} is {b.type}")
    return Select(condition, a, b, a.type)


def logical_and(*conds: Any) -> Expr:
    """``c0 && c1 && ...`` (Python's ``and`` cannot be overloaded)."""
    if not conds:
        raise TypeError("logical_and needs at least one condition")
    result = as_condition(conds[0], "logical_and")
    for cond in conds[1:]:
        result = binary("and", result, as_condition(cond, "logical_and"))
    return result


def logical_or(*conds: Any) -> Expr:
    """``c0 || c1 || ...``."""
    if not conds:
        raise TypeError("logical_or needs at least one condition")
    result = as_condition(conds[0], "logical_or")
    for cond in conds[1:]:
        result = binary("or", result, as_condition(cond, "logical_or"))
    return result


def logical_not(cond: Any) -> Expr:
    """``!cond``."""
    return Unary("not", as_condition(cond, "logical_not"), boolean)


def _same_type(name: str, *values: Any) -> tuple[Expr, ...]:
    typed = next((v.type for v in values if isinstance(v, Expr)), None)
    exprs = tuple(as_expr(v, typed) for v in values)
    if any(e.type != exprs[0].type for e in exprs):
        raise TypeError(f"{name} arguments differ in type: {', '.join(f'{e!r}: {e.type}' for e in exprs)}")
    return exprs


def min_(a: Any, b: Any) -> Expr:
    """The smaller of two ints (``min``) or two f32 (``fminf``)."""
    x, y = _same_type("min_", a, b)
    if x.type not in (i32, u32, f32):
        raise TypeError(f"min_ supports i32, u32 and f32, got {x.type}")
    return Call("fmin" if x.type == f32 else "min", (x, y), x.type)


def max_(a: Any, b: Any) -> Expr:
    """The larger of two ints (``max``) or two f32 (``fmaxf``)."""
    x, y = _same_type("max_", a, b)
    if x.type not in (i32, u32, f32):
        raise TypeError(f"max_ supports i32, u32 and f32, got {x.type}")
    return Call("fmax" if x.type == f32 else "max", (x, y), x.type)


def _f32_call(name: str, *args: Any) -> Expr:
    exprs = _same_type(name, *(as_expr(a, f32) for a in args))
    if exprs[0].type != f32:
        raise TypeError(f"{name} needs f32 arguments, got {exprs[0]!r} of type {exprs[0].type}; cast first")
    return Call(name, exprs, f32)


def exp(x: Any) -> Expr:
    return _f32_call("exp", x)


def exp2(x: Any) -> Expr:
    return _f32_call("exp2", x)


def fast_exp(x: Any) -> Expr:
    """``__expf``: faster, less accurate than ``exp``."""
    return _f32_call("fast_exp", x)


def log(x: Any) -> Expr:
    return _f32_call("log", x)


def sqrt(x: Any) -> Expr:
    return _f32_call("sqrt", x)


def rsqrt(x: Any) -> Expr:
    return _f32_call("rsqrt", x)


def abs_(x: Any) -> Expr:
    return _f32_call("abs", x)


def fast_div(a: Any, b: Any) -> Expr:
    """``__fdividef(a, b)``."""
    return _f32_call("fast_div", a, b)


def fma(a: Any, b: Any, c: Any) -> Expr:
    """``a * b + c`` with one rounding."""
    return _f32_call("fma", a, b, c)


def _shuffle(kind: str, value: Any, lane: Any, width: int | None, mask: int) -> Expr:
    v = as_expr(value)
    if v.type not in (i32, u32, f32):
        raise TypeError(f"warp shuffles move i32, u32 or f32 values, got {v!r} of type {v.type}")
    args: tuple[Expr, ...] = (as_expr(mask, u32), v, as_expr(lane, i32))
    if width is not None:
        args = (*args, as_expr(width, i32))
    return Call(kind, args, v.type)


def shfl_sync(value: Any, src_lane: Any, width: int | None = None, mask: int = FULL_MASK) -> Expr:
    """``__shfl_sync(mask, value, src_lane[, width])``."""
    return _shuffle("shfl", value, src_lane, width, mask)


def shfl_xor_sync(value: Any, lane_mask: Any, width: int | None = None, mask: int = FULL_MASK) -> Expr:
    """``__shfl_xor_sync(mask, value, lane_mask[, width])``: the butterfly step of a warp reduction."""
    return _shuffle("shfl_xor", value, lane_mask, width, mask)


def shfl_down_sync(value: Any, delta: Any, width: int | None = None, mask: int = FULL_MASK) -> Expr:
    return _shuffle("shfl_down", value, delta, width, mask)


def shfl_up_sync(value: Any, delta: Any, width: int | None = None, mask: int = FULL_MASK) -> Expr:
    return _shuffle("shfl_up", value, delta, width, mask)


def floats_to_half2(low: Any, high: Any) -> Expr:
    """Two f32 rounded into one f16 pair (``__floats2half2_rn``); ``low`` is lane 0."""
    return floats_to_pair(f16, low, high)


_PAIR_FUNCTIONS = {f16: "floats_to_half2", bf16: "floats_to_bfloat162"}


def floats_to_pair(element: DataType, low: Any, high: Any) -> Expr:
    """Two f32 rounded to nearest into one pair of 16-bit ``element`` values (f16 or bf16), to store as
    one 4-byte vector."""
    if element not in _PAIR_FUNCTIONS:
        raise TypeError(f"floats_to_pair packs f16 or bf16 pairs, not {element}")
    name = _PAIR_FUNCTIONS[element]
    a, b = (as_expr(v, f32) for v in (low, high))
    if a.type != f32 or b.type != f32:
        raise TypeError(f"{name} needs f32 values, got {a!r}: {a.type}, {b!r}: {b.type}")
    return Call(name, (a, b), vec(element, 2))


def half2_to_floats(pair: Expr) -> Expr:
    """An f16 pair widened to ``float2`` (``__half22float2``)."""
    if pair.type != vec(f16, 2):
        raise TypeError(f"half2_to_floats needs an f16 pair, got {pair!r} of type {pair.type}")
    return Call("half2_to_floats", (pair,), vec(f32, 2))


def make_vector(*elements: Any) -> Expr:
    """``make_float4(a, b, c, d)`` and friends, from 2 or 4 values of one 4-byte type."""
    exprs = _same_type("make_vector", *elements)
    if isinstance(exprs[0].type, DataType) and exprs[0].type.nbytes != 4:
        raise TypeError(f"make_vector takes 4-byte values; pack 16-bit pairs with floats_to_pair, not {exprs[0].type}")
    return MakeVector(exprs, vec(exprs[0].type, len(exprs)))  # type: ignore[arg-type]


def lane(vector: Expr, index: int) -> Expr:
    """Element ``index`` of a vector value (``v.x`` is ``lane(v, 0)``)."""
    if not isinstance(vector.type, VectorType) or not 0 <= index < vector.type.lanes:
        raise TypeError(f"lane {index} of {vector!r} of type {vector.type}")
    return Lane(vector, index, vector.type.element)


def extern_call(func: str, *args: Any, returns: Type = void, header: str = PRIMS_HEADER,
                template_args: tuple[int, ...] = ()) -> Call:
    """A call of a device function declared in ``header`` (by default the ``wm_*`` wrappers)."""
    return Call(func, tuple(as_expr(a) for a in args), returns, header, template_args)


#: Bit reinterpretations between 4-byte scalars: (from, to) -> the abstract function name.
BITCASTS = {
    ("f32", "i32"): "bitcast_f32_i32", ("f32", "u32"): "bitcast_f32_u32",
    ("i32", "f32"): "bitcast_i32_f32", ("u32", "f32"): "bitcast_u32_f32",
}


def bitcast(value: Any, dtype: DataType) -> Expr:
    """The bits of an f32 read as an i32 or u32, or the other way round (``__float_as_int(x)`` ...).

    No value is converted: ``bitcast(1.0, i32)`` is ``0x3F800000``. Exponent tricks (building ``2**n``
    from ``(n + 127) << 23``) need it; ``cast`` converts values instead.
    """
    expr = as_expr(value, f32 if dtype != f32 else None)
    key = (getattr(expr.type, "name", None), dtype.name)
    if key not in BITCASTS:
        known = ", ".join(f"{a}->{b}" for a, b in BITCASTS)
        raise TypeError(f"bitcast of {expr!r} from {expr.type} to {dtype}: only {known}")
    return Call(BITCASTS[key], (expr,), dtype)


def prefetch(address: Expr, *, write: bool = False, locality: int = 3) -> Call:
    """A hint to bring the cache line at ``address`` (``buffer.address(...)``) closer; evaluate it with
    ``call(prefetch(...))``. ``write`` says the line will be written, ``locality`` (0-3) how long it
    should stay cached.

    Host only: the host spells it ``__builtin_prefetch``; CUDA has no spelling and refuses it (a GPU
    kernel wanting the data earlier stages it through shared memory instead), so a kernel that asks
    for a hint says it is a host kernel.
    """
    if not isinstance(address.type, PointerType):
        raise TypeError(f"prefetch needs an address (buffer.address(...)), got {address!r}")
    if not 0 <= locality <= 3:
        raise ValueError(f"prefetch locality is 0 to 3, got {locality}")
    return Call("prefetch", (address, as_expr(int(write), i32), as_expr(locality, i32)), void)


def worker_slot() -> Call:
    """The number of the host thread running this block: 0 up to the launch's threads, and the same for
    every thread of the block (they run one after another on it). Scratch indexed by it is private to the
    block while the block runs, and is reused by the thread's next block while still in its caches: a
    block's scratch needs a slot per thread, not per block. A kernel that uses it bounds its launch's
    threads with ``host_max_workers`` (``compiler.ir.kernel.Kernel``), the slots it has.

    Host only (``omp_get_thread_num``); CUDA has no spelling and refuses it.
    """
    return Call("worker_slot", (), i32)
