"""Host C++ code generation: a lowered kernel to an OpenMP shared-object entry point.

The host is a second dialect of the same renderer (``HOST``): expressions and statements are spelled
by the shared ``StmtRenderer`` from the dialect's data; only the frame around the body differs.

Execution model. A launch is one call of ``extern "C" void <name>(<params>..., int workers)``, the
parameters in ``Kernel.params`` order followed by the number of host threads to use. Blocks are the
unit of parallelism: the flattened grid is an OpenMP ``parallel for schedule(static)`` over
``workers`` threads (``schedule(dynamic)`` in chunks of about 1/8 of a thread's share when the
kernel's ``host_schedule`` asks), and ``blockIdx`` is unflattened from the loop index (x fastest).
Within a block the CUDA threads run one after another in serial loops (z, y, x outermost to innermost), each running
the whole kernel body. That is only the CUDA semantics when threads of a block never talk to each
other, so anything that lets them (barriers, shared memory, warp shuffles, atomics) is refused with a
``CodegenError``, as are CUDA-only values (vector types such as ``float4``, 16-bit floats, the
``wm_*`` tensor-core and async-copy wrappers). The emulator is the place for CUDA semantics; host
kernels are written host-first.

Spelling. Pointers are ``__restrict__``; math is ``<cmath>``'s float functions (``fast_exp`` is plain
``expf`` and ``fast_div`` a plain division: the host has no cheaper approximations to map them to);
``#pragma unroll`` becomes ``#pragma GCC unroll 32``, GCC's form needing a bound; a loop marked
``simd`` (``range_(..., simd=True)``: independent iterations) gets ``#pragma omp simd`` instead
(GCC allows one of the two before a loop). The serial
thread loop gets none: on the example kernels it measured no faster (their inner work is a call of
``expf`` or a loop of its own). Loops start where the IR's ``For`` says (0 unless given) and step by
its constant step; ``prefetch`` hints are ``__builtin_prefetch``.

Example::

    >>> from compiler.ir import f32, if_, kernel, lower, threadIdx, blockIdx
    >>> with kernel("twice", block=4, grid=3) as k:
    ...     x = k.tensor("x", f32, (10,))
    ...     with if_(blockIdx.x * 4 + threadIdx.x < 10):
    ...         x[blockIdx.x * 4 + threadIdx.x] = x[blockIdx.x * 4 + threadIdx.x] * 2.0
    >>> print(render_host(lower(k.kernel)).source)  # doctest: +ELLIPSIS
    #include <algorithm>
    ...
    extern "C" void twice(float* __restrict__ x, int workers) {
    #pragma omp parallel for schedule(static) num_threads(workers)
        for (long long wm_block = 0; wm_block < 3LL; ++wm_block) {
            twice_block(x, (int)(wm_block), 0, 0);
        }
    }
    <BLANKLINE>
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from compiler.codegen.dialect import Dialect
from compiler.codegen.expressions import pointer_param
from compiler.codegen.kernel import required_headers
from compiler.codegen.names import CodegenError, Names, assign_names
from compiler.codegen.statements import INDENT, StmtRenderer
from compiler.ir.bounds import RangeEnv
from compiler.ir.expr import Call, Expr, Lane, MakeVector, VectorLoad
from compiler.ir.hoist import hoist_thread_invariants
from compiler.ir.intrinsics import BITCASTS
from compiler.ir.kernel import Kernel
from compiler.ir.rewrite import walk
from compiler.ir.stmt import DeclareBuffer, Stmt, Sync, VectorStore
from compiler.ir.types import DataType, PointerType, VectorType
from compiler.source import KernelSource, Param

_AXES = "xyz"
#: Local names the frame declares: the block and thread coordinates and the launch extents.
_BLOCK, _THREAD, _BLOCK_DIM, _GRID_DIM, _FLAT = "wm_bid_", "wm_tid_", "wm_bdim_", "wm_gdim_", "wm_block"
_CHUNK = "wm_chunk"
#: The threads of a launch whose kernel bounds them (``Kernel.host_max_workers``).
_THREADS = "wm_threads"
#: A dynamic schedule hands out about this many chunks per thread: few enough that taking one (an
#: atomic) costs nothing next to a block, enough that a late or slow thread leaves work to others.
CHUNKS_PER_WORKER = 8
_FRAME_NAMES = frozenset(
    {_FLAT, _CHUNK, _THREADS, "workers"}
    | {prefix + a for prefix in (_BLOCK, _THREAD, _BLOCK_DIM, _GRID_DIM) for a in _AXES}
)


def _index_names() -> Mapping[str, str]:
    prefixes = {"blockIdx": _BLOCK, "threadIdx": _THREAD, "blockDim": _BLOCK_DIM, "gridDim": _GRID_DIM}
    return MappingProxyType({f"{base}.{a}": prefix + a for base, prefix in prefixes.items() for a in _AXES})


def _refused(what: str) -> str:
    return f"{what} (refused by the host dialect: threads of a block run one after another)"


HOST = Dialect(
    name="host",
    entry_qualifiers="static",
    launch_bounds="",
    launch_bounds_min_blocks="",
    restrict="__restrict__",
    shared_array=_refused("__shared__ {type} {name}{dims};"),
    dynamic_shared_array=_refused("extern __shared__ {name}"),
    dynamic_shared_name="wm_no_dynamic_shared",
    block_barrier=_refused("__syncthreads()"),
    warp_barrier=_refused("__syncwarp({mask})"),
    warp_barrier_full=_refused("__syncwarp()"),
    unroll_pragma="#pragma GCC unroll 32",
    unroll_factor_pragma="#pragma GCC unroll {factor}",
    type_names=MappingProxyType({
        "f32": "float", "i32": "int", "i64": "long long", "u32": "unsigned int", "bool": "bool",
    }),
    index_names=_index_names(),
    functions=MappingProxyType({
        "min": "std::min", "max": "std::max", "fmin": "fminf", "fmax": "fmaxf", "abs": "fabsf",
        "exp": "expf", "exp2": "exp2f", "fast_exp": "expf", "log": "logf", "sqrt": "sqrtf",
        "rsqrt": "wm_rsqrtf", "fast_div": "wm_divf", "fma": "fmaf",
        **{name: "wm_" + name for name in BITCASTS.values()},
        "prefetch": "__builtin_prefetch",
        "worker_slot": "omp_get_thread_num",
    }),
    conversions=MappingProxyType({}),
    type_headers=MappingProxyType({}),
    local_headers=frozenset(),
    float_infinity="__builtin_inff()",
    simd_pragma="#pragma omp simd",
    function_headers=MappingProxyType({"worker_slot": "omp.h"}),
)
"""The host C++ spelling. The barrier and shared-memory fields are never rendered (``check_host``
refuses those constructs first); they say so should one ever reach the text."""

_C_TYPES = {"f32": "float", "i32": "int", "u32": "unsigned int"}
#: Bit reinterpretations as inline functions: a memcpy of 4 bytes, which g++ turns into a register move
#: (or nothing, in vector code) and which, unlike a pointer cast, is defined C++.
_BITCAST_PRELUDE = tuple(
    f"inline {_C_TYPES[b]} wm_{name}({_C_TYPES[a]} x) {{ {_C_TYPES[b]} r; __builtin_memcpy(&r, &x, 4); return r; }}"
    for (a, b), name in BITCASTS.items()
)

_PRELUDE = (
    "#include <algorithm>",
    "#include <cmath>",
    "",
    "namespace {",
    "inline float wm_rsqrtf(float x) { return 1.0f / sqrtf(x); }",
    "inline float wm_divf(float a, float b) { return a / b; }",
    *_BITCAST_PRELUDE,
    "}  // namespace",
    "",
)


def check_host(kernel: Kernel) -> None:
    """Raise ``CodegenError`` naming the first construct of ``kernel`` the host dialect cannot express."""
    where = f"kernel {kernel.name}: "
    if kernel.dynamic_shared_bytes:
        raise CodegenError(where + _refused("dynamic shared memory"))
    for param in kernel.params:
        _check_type(param.type, where + f"parameter {param.name}")
    for stmt in kernel.body:
        for node in walk(stmt):
            problem = _problem(node)
            if problem is not None:
                raise CodegenError(where + problem)


def _problem(node: Expr | Stmt) -> str | None:
    if isinstance(node, Sync):
        return _refused(f"a {node.scope} barrier")
    if isinstance(node, DeclareBuffer) and node.buffer.scope != "register":
        return _refused(f"{node.buffer.scope} buffer {node.buffer.name!r}")
    if isinstance(node, VectorStore | VectorLoad | MakeVector | Lane):
        return f"CUDA vector value {type(node).__name__} has no host spelling; use scalars"
    if isinstance(node, Call) and node.func not in HOST.functions:
        kind = ("warp shuffle" if node.func.startswith("shfl")
                else "atomic" if node.func.startswith("atomic") else "device function")
        return _refused(f"{kind} {node.func!r}")
    if isinstance(node, Expr):
        try:
            _check_type(node.type, f"value {node!r}")
        except CodegenError as exc:
            return str(exc)
    return None


def _check_type(t: object, what: str) -> None:
    scalar = t.element if isinstance(t, PointerType) else t
    if isinstance(t, VectorType):
        raise CodegenError(f"{what}: CUDA vector type {t} has no host spelling")
    if isinstance(scalar, DataType) and scalar.name not in HOST.type_names:
        raise CodegenError(f"{what}: {scalar} has no host spelling (convert 16-bit floats to f32 first)")


def render_host(kernel: Kernel) -> KernelSource:
    """The host C++ translation unit of the lowered ``kernel`` (a pure function of it).

    ``entry`` is the exported symbol; its parameters are ``params`` followed by ``int workers``.
    Raises ``CodegenError`` for what the host cannot express (see ``check_host``).
    """
    check_host(kernel)
    kernel = hoist_thread_invariants(kernel)
    names = assign_names(kernel)
    clashes = sorted(_FRAME_NAMES & {*names.variables.values(), *names.buffers.values()})
    if clashes:
        raise CodegenError(f"kernel {kernel.name}: names {', '.join(clashes)} are taken by the host frame")
    params = [pointer_param(HOST, names, p) for p in kernel.params]
    headers = sorted(required_headers(kernel, HOST) - {"algorithm", "cmath"})
    lines = [*_PRELUDE[:2], *(f"#include <{h}>" for h in headers), *_PRELUDE[2:]]
    lines += _block_function(kernel, names, params)
    lines += ["", *_entry(kernel, names, params), ""]
    return KernelSource(
        entry=kernel.name,
        source="\n".join(lines),
        grid=kernel.grid,
        block=kernel.block,
        params=tuple(_param(p.name, p.type) for p in kernel.params),
    )


def _param(name: str, t: object) -> Param:
    scalar = t.element if isinstance(t, PointerType) else t
    assert isinstance(scalar, DataType)
    return Param(name, scalar.dtype, pointer=isinstance(t, PointerType))


def _block_function(kernel: Kernel, names: Names, params: list[str]) -> list[str]:
    """One block's work: the launch extents as constants, then the block's threads in serial loops."""
    coords = [f"const int {_BLOCK}{a}" for a in _AXES]
    lines = _signature(f"static void {kernel.name}_block(", [*params, *coords])
    for prefix, dims in ((_BLOCK_DIM, kernel.block), (_GRID_DIM, kernel.grid)):
        extents = ", ".join(f"{prefix}{a} = {n}" for a, n in zip(_AXES, dims, strict=True))
        lines.append(f"{INDENT}const int {extents};")
    depth = 1
    for axis, extent in reversed(tuple(zip(_AXES, kernel.block, strict=True))):
        name = _THREAD + axis
        if extent == 1:
            lines.append(INDENT * depth + f"const int {name} = 0;")
        else:
            lines.append(INDENT * depth + f"for (int {name} = 0; {name} < {extent}; ++{name}) {{")
            depth += 1
    lines += StmtRenderer(HOST, names, RangeEnv.for_launch(kernel.block, kernel.grid)).body(kernel.body, depth)
    while depth > 1:
        depth -= 1
        lines.append(INDENT * depth + "}")
    return [*lines, "}"]


def _signature(head: str, params: list[str]) -> list[str]:
    one_line = head + ", ".join(params) + ") {"
    if len(one_line) <= 110:
        return [one_line]
    return [head, *(f"{INDENT * 2}{p}," for p in params[:-1]), f"{INDENT * 2}{params[-1]}) {{"]


def _coordinate(inner: int, extent: int, outer: int) -> str:
    """Block coordinate ``flat / inner % extent`` of the flattened grid, without the no-op parts."""
    if extent == 1:
        return "0"
    text = _FLAT if inner == 1 else f"{_FLAT} / {inner}LL"
    return f"(int)({text})" if outer == 1 else f"(int)({text} % {extent}LL)"


def _entry(kernel: Kernel, names: Names, params: list[str]) -> list[str]:
    gx, gy, gz = kernel.grid
    args = [names.var(p) for p in kernel.params]
    coords = [_coordinate(1, gx, gy * gz), _coordinate(gx, gy, gz), _coordinate(gx * gy, gz, 1)]
    threads, bound = "workers", []
    if kernel.host_max_workers is not None:
        # A launch never runs more threads than the kernel's per-thread scratch has slots.
        threads, bound = _THREADS, [f"{INDENT}const int {_THREADS} = std::min(workers, {kernel.host_max_workers});"]
    schedule = [*bound, f"#pragma omp parallel for schedule(static) num_threads({threads})"]
    if kernel.host_schedule == "dynamic":
        blocks = f"{gx * gy * gz}LL"
        schedule = [*bound, f"{INDENT}const long long {_CHUNK} = std::max(1LL, {blocks} / "
                    f"({CHUNKS_PER_WORKER}LL * {threads}));",
                    f"#pragma omp parallel for schedule(dynamic, {_CHUNK}) num_threads({threads})"]
    return [
        *_signature(f'extern "C" void {kernel.name}(', [*params, "int workers"]),
        *schedule,
        f"{INDENT}for (long long {_FLAT} = 0; {_FLAT} < {gx * gy * gz}LL; ++{_FLAT}) {{",
        f"{INDENT * 2}{kernel.name}_block({', '.join([*args, *coords])});",
        f"{INDENT}}}",
        "}",
    ]
