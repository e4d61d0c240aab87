"""``/v1/kernels``: the cache, filtered and paged; one kernel whole; a lookup by spec.

Lookups never write: a hit is counted in memory and added to the kernel's ``hits`` by the app's
flush task, a batch every ``api_flush_s`` seconds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query

from db import get_kernel
from db.cache import KernelFilter, count_kernels, list_kernels
from db.records import WorkloadSpec
from service.api import convert, schemas
from service.api.auth import ReadKey, State
from service.api.errors import documented
from service.api.limits import check_spec_bounds, known_query
from service.api.targets import choose, registered_workers

router = APIRouter(prefix="/v1/kernels", tags=["kernels"], dependencies=[Depends(known_query)])

#: Spec dimensions for ``?shape=``: ``m:512,n:512,k:64``.
SHAPE_PATTERN = r"^[a-z_]{1,16}:[0-9]{1,9}(,[a-z_]{1,16}:[0-9]{1,9}){0,7}$"
#: Printable text without control characters (PostgreSQL refuses NUL in text).
TEXT_PATTERN = r"^[\x20-\x7e]{1,200}$"


def _lookup_examples() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for spec in schemas.operator_examples():
        name = f"{spec['op']} {len([k for k in found if k.startswith(spec['op'])]) + 1}"
        found[name] = {"summary": f"a cached {spec['op']} for the cpu", "value": {"operator": spec, "target": "cpu"}}
    return found


def _dims(shape: str | None) -> tuple[tuple[str, int], ...]:
    """``"m:512,n:64"`` -> ``(("m", 512), ("n", 64))``.

    >>> _dims("m:512,n:64")
    (('m', 512), ('n', 64))
    """
    if not shape:
        return ()
    return tuple((name, int(value)) for name, value in (part.split(":") for part in shape.split(",")))


@router.get("", response_model=schemas.KernelPage, responses=documented(401, 403),
            summary="Cached kernels, most recently updated first, a page at a time")
async def list_cached(
    _: ReadKey,
    state: State,
    op: Annotated[str | None, Query(pattern=r"^[a-z0-9_]{1,64}$", description="operator name")] = None,
    dtype: Annotated[Literal["float32", "float16", "bfloat16"] | None, Query()] = None,
    device: Annotated[str | None, Query(pattern=TEXT_PATTERN, description="part of a device name, or its key")] = None,
    arch: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.+-]{1,64}$", description="sm_90, or a host ISA")] = None,
    shape: Annotated[str | None, Query(pattern=SHAPE_PATTERN, description="spec dimensions: m:512,n:512")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=schemas.MAX_ID)] = 0,
) -> schemas.KernelPage:
    where = KernelFilter(op=op, dtype=dtype, device=device, arch=arch, dims=_dims(shape))
    items, total = await state.read(_kernel_page, where=where, limit=limit, offset=offset)
    return schemas.KernelPage(items=[convert.summary(k) for k in items], total=total, limit=limit, offset=offset)


def _kernel_page(*, session: Any, where: KernelFilter, limit: int, offset: int) -> tuple[list[Any], int]:
    return (list_kernels(session=session, where=where, limit=limit, offset=offset),
            count_kernels(session=session, where=where))


@router.get("/{kernel_id}", response_model=schemas.Kernel, responses=documented(401, 403, 404),
            summary="A cached kernel whole: spec, schedule, source, binary, launch, arguments, metrics")
async def read_kernel(
    kernel_id: Annotated[int, Path(ge=1, le=schemas.MAX_ID)],
    _: ReadKey,
    state: State,
) -> schemas.Kernel:
    return convert.kernel(await state.read(get_kernel, kernel_id=kernel_id))


@router.post("/lookup", response_model=schemas.Kernel, responses=documented(400, 401, 403, 404, 413, 415),
             summary="The cached kernel for a spec on a target (exact; nearest only when asked)")
async def lookup(
    body: Annotated[schemas.LookupRequest, Body(openapi_examples=_lookup_examples())],
    _: ReadKey,
    state: State,
) -> schemas.Kernel:
    check_spec_bounds(body.operator, state.settings)
    target, worker = choose(await registered_workers(state), body.target)
    workload = WorkloadSpec(op=body.operator.op, spec=body.operator.model_dump(mode="json"))
    hit = await state.cached_lookup(workload, worker.device, worker.toolchain, body.nearest)
    if hit is None:
        state.metrics.misses.labels("lookup").inc()
        raise HTTPException(404, f"no cached kernel for this {workload.op} on {worker.device.name} ({target})")
    state.metrics.hits.labels("lookup").inc()
    return convert.kernel(hit.kernel, hit.exact)

