"""The Python client of warpmap's HTTP API (``/v1``): ask for a tuned kernel, get one you can call.

Example (a service must be running; ``examples/tune_over_http.py`` is the whole story)::

    with Client("http://127.0.0.1:8000", api_key=key) as client:
        kernel = client.tune({"op": "matmul", "m": 512, "n": 512, "k": 512}, target="cpu")
    matmul = kernel.load()
    matmul(a=a, b=b, c=c)   # numpy arrays; c is written in place

``tune`` answers from the cache when it can, else starts (or joins) a tuning job and waits for it: the
server holds the request up to ``wait`` seconds, then the client polls the job until it ends or the wait
runs out. Errors are exceptions that carry the server's ``detail``: :class:`AuthenticationError` (401),
:class:`PermissionDeniedError` (403), :class:`NotFoundError` (404), :class:`ConflictError` (409),
:class:`InvalidRequestError` (422, naming the bad fields), :class:`TuningFailedError` (the job failed or was
cancelled) and :class:`TuningTimeoutError` (a ``TimeoutError``: the job is still going; its id is on it).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from service.client_types import (
    FINISHED,
    ClientError,
    Device,
    KernelSummary,
    Toolchain,
    Trial,
    TunedKernel,
    Tuning,
    argument_shapes,
    host_arch,
)

__all__ = [
    "FINISHED",
    "MAX_HOLD_S",
    "AuthenticationError",
    "Client",
    "ClientError",
    "ConflictError",
    "Device",
    "InvalidRequestError",
    "KernelSummary",
    "NotFoundError",
    "PermissionDeniedError",
    "ServiceUnavailableError",
    "Toolchain",
    "Trial",
    "TunedKernel",
    "Tuning",
    "TuningFailed",
    "TuningFailedError",
    "TuningTimeoutError",
    "argument_shapes",
    "host_arch",
]

#: The longest ``tune`` asks the service to hold one request; it polls after that (proxies end long requests).
MAX_HOLD_S = 300.0


class ServiceUnavailableError(ClientError):
    """No answer (connection refused, time-out) or a 5xx."""


class AuthenticationError(ClientError):
    """401: no API key, or one the service does not know."""


class PermissionDeniedError(ClientError):
    """403: the key lacks the scope the request needs."""


class NotFoundError(ClientError):
    """404: no such job or kernel."""


class ConflictError(ClientError):
    """409: e.g. cancelling a job that already ended."""


class InvalidRequestError(ClientError):
    """422: the request did not validate; ``fields`` are the paths of the bad fields (``body.target``)."""

    def __init__(self, message: str, *, status: int = 422, detail: Any = None) -> None:
        super().__init__(message, status=status, detail=detail)
        items = detail if isinstance(detail, list) else []
        self.fields = tuple(".".join(str(p) for p in item.get("loc", ())) for item in items if isinstance(item, dict))


class TuningFailedError(ClientError):
    """The tuning job ended without a kernel (``failed`` or ``cancelled``)."""

    def __init__(self, tuning: Tuning) -> None:
        reason = f": {tuning.error}" if tuning.error else ""
        super().__init__(f"tuning {tuning.id} {tuning.status}{reason}", detail=tuning.error)
        self.tuning = tuning
        self.job_id = tuning.id


class TuningTimeoutError(TimeoutError):
    """The wait ended before the job did; the job goes on (poll ``Client.tuning(job_id)`` or cancel it)."""

    def __init__(self, tuning: Tuning, waited_s: float) -> None:
        progress = tuning.progress or {}
        done = progress.get("trials_done")
        trials = f", {done} of {progress.get('trials_budget') or '?'} trials done" if done is not None else ""
        super().__init__(f"tuning {tuning.id} still {tuning.status} after {waited_s:.0f} s{trials}")
        self.tuning = tuning
        self.job_id = tuning.id


#: The names the service's issue gives them.
TuningFailed = TuningFailedError

_ERRORS: Mapping[int, type[ClientError]] = {401: AuthenticationError, 403: PermissionDeniedError,
                                            404: NotFoundError, 409: ConflictError, 422: InvalidRequestError}


def _spec(spec: Any) -> dict[str, Any]:
    """A spec as JSON data: a mapping, or a spec model (anything with ``model_dump``)."""
    if hasattr(spec, "model_dump"):
        return spec.model_dump(mode="json")
    if not isinstance(spec, Mapping):
        raise TypeError(f"an operator spec is a mapping such as {{'op': 'matmul', ...}}, got {type(spec).__name__}")
    return dict(spec)


class Client:
    """A synchronous client of one warpmap service. ``timeout``: seconds for each request (a ``?wait``
    request gets its wait on top). Use it as a context manager, or call ``close()``."""

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, timeout=timeout or self.timeout, **kwargs)
        except httpx.TransportError as exc:
            raise ServiceUnavailableError(f"{method} {self.url}{path}: no answer from the service: {exc}") from exc
        if response.status_code < 400:
            return response
        try:
            detail = response.json().get("detail")
        except (ValueError, AttributeError):
            detail = response.text[:500] or None
        cls = _ERRORS.get(response.status_code, ServiceUnavailableError if response.status_code >= 500
                          else ClientError)
        raise cls(f"{method} {path}: {response.status_code} {_describe(detail)}", status=response.status_code,
                  detail=detail)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as exc:
            raise ClientError(f"{method} {path}: the service answered {response.status_code} with no JSON",
                              status=response.status_code) from exc

    def submit(self, spec: Any, *, target: str | None = None, strategy: str | None = None,
               budget: Mapping[str, Any] | None = None, level: int | None = None, seed: int | None = None,
               warm_start: bool | None = None, wait: float = 0.0) -> tuple[TunedKernel | None, Tuning | None]:
        """``POST /v1/tunings``: (the kernel, if the cache had it or the job finished within ``wait``; the job,
        when one was started or joined). ``warm_start=False`` asks for a cold tuning (the service's default
        starts from the workload's best schedules that its cache holds for other devices or toolchains)."""
        body: dict[str, Any] = {"operator": _spec(spec)}
        optional = {"target": target, "strategy": strategy, "budget": None if budget is None else dict(budget),
                    "level": level, "seed": seed, "warm_start": warm_start}
        body.update({k: v for k, v in optional.items() if v is not None})
        params = {"wait": f"{wait:g}"} if wait > 0 else None
        data = self._json("POST", "/v1/tunings", json=body, params=params, timeout=self.timeout + max(wait, 0.0))
        kernel = TunedKernel.parse(data["kernel"]) if data.get("kernel") else None
        tuning = Tuning.parse(data["tuning"]) if data.get("tuning") else None
        return kernel, tuning

    def tune(self, spec: Any, target: str | None = None, strategy: str | None = None,
             budget: Mapping[str, Any] | None = None, level: int | None = None, *, seed: int | None = None,
             warm_start: bool | None = None, wait: float = 600.0, poll_s: float = 0.5) -> TunedKernel:
        """The best kernel for ``spec``: from the cache, else by tuning it (waiting up to ``wait`` seconds,
        polling every ``poll_s`` to 10 x ``poll_s``). Raises :class:`TuningFailedError` if the job fails
        or is cancelled, :class:`TuningTimeoutError` if it is still going when the wait ends."""
        started = time.monotonic()
        submit = functools.partial(self.submit, spec, target=target, strategy=strategy, budget=budget, level=level,
                                   seed=seed, warm_start=warm_start)
        try:
            kernel, tuning = submit(wait=min(wait, MAX_HOLD_S))
        except InvalidRequestError as exc:
            if "query.wait" not in exc.fields:
                raise
            # The service holds requests for less than asked: an identical request joins the job; poll it.
            kernel, tuning = submit()
        if kernel is not None:
            return kernel
        if tuning is None:
            raise ClientError("POST /v1/tunings: the service sent neither a kernel nor a tuning")
        delay = poll_s
        while not tuning.finished:
            left = wait - (time.monotonic() - started)
            if left <= 0:
                raise TuningTimeoutError(tuning, wait)
            time.sleep(min(delay, left))
            delay = min(delay * 1.5, 10 * poll_s)
            tuning = self.tuning(tuning.id)
        if tuning.status != "succeeded":
            raise TuningFailedError(tuning)
        if tuning.kernel_id is not None:
            return self.kernel(tuning.kernel_id)
        found = self.lookup(tuning.operator or _spec(spec), target=tuning.target.partition(":")[0] or target)
        if found is None:
            raise ClientError(f"tuning {tuning.id} succeeded, but the cache has no kernel for it")
        return found

    def tuning(self, tuning_id: int) -> Tuning:
        """``GET /v1/tunings/{id}``."""
        return Tuning.parse(self._json("GET", f"/v1/tunings/{int(tuning_id)}"))

    def tunings(self, status: str | None = None, op: str | None = None, limit: int = 50, *,
                offset: int = 0) -> list[Tuning]:
        """``GET /v1/tunings``: one page of the tunings, newest first, filtered by status and operator."""
        params = {k: v for k, v in {"status": status, "op": op}.items() if v is not None}
        data = self._json("GET", "/v1/tunings", params={**params, "limit": limit, "offset": offset})
        return [Tuning.parse(item) for item in data.get("items", ())]

    def cancel(self, tuning_id: int) -> Tuning:
        """``DELETE /v1/tunings/{id}``: the job stops after its current trial; :class:`ConflictError` if it
        already ended."""
        return Tuning.parse(self._json("DELETE", f"/v1/tunings/{int(tuning_id)}"))

    def trials(self, tuning_id: int, *, limit: int = 50, offset: int = 0) -> list[Trial]:
        """One page of a job's trials, in order."""
        data = self._json("GET", f"/v1/tunings/{int(tuning_id)}/trials", params={"limit": limit, "offset": offset})
        return [Trial.parse(item) for item in data.get("items", ())]

    def kernel(self, kernel_id: int) -> TunedKernel:
        """``GET /v1/kernels/{id}``."""
        return TunedKernel.parse(self._json("GET", f"/v1/kernels/{int(kernel_id)}"))

    def lookup(self, spec: Any, target: str | None = None, nearest: bool = False) -> TunedKernel | None:
        """The cached kernel for ``spec`` (exact match; a near one, marked ``exact=False``, only when
        ``nearest``), or None."""
        body: dict[str, Any] = {"operator": _spec(spec), "nearest": nearest}
        if target is not None:
            body["target"] = target
        try:
            return TunedKernel.parse(self._json("POST", "/v1/kernels/lookup", json=body))
        except NotFoundError:
            return None

    def kernels(self, op: str | None = None, dtype: str | None = None, device: str | None = None,
                limit: int = 50, *, arch: str | None = None, offset: int = 0) -> list[KernelSummary]:
        """One page of the cache, filtered by operator, dtype, device name and arch."""
        params = {k: v for k, v in {"op": op, "dtype": dtype, "device": device, "arch": arch}.items() if v is not None}
        data = self._json("GET", "/v1/kernels", params={**params, "limit": limit, "offset": offset})
        return [KernelSummary.parse(item) for item in data.get("items", ())]

    def devices(self) -> list[Mapping[str, Any]]:
        """``GET /v1/devices``: each worker's device, alive or not."""
        return list(self._json("GET", "/v1/devices").get("items", ()))

    def health(self) -> Mapping[str, Any]:
        return self._json("GET", "/healthz")


def _describe(detail: Any) -> str:
    """The server's detail in one line: a string as is, FastAPI's validation list as ``field: message``.

    >>> _describe([{"loc": ["body", "budget", "trials"], "msg": "must be >= 1"}, {"msg": "and more"}])
    'body.budget.trials: must be >= 1; and more'
    """
    if isinstance(detail, Sequence) and not isinstance(detail, str):
        parts = []
        for item in detail:
            if isinstance(item, Mapping):
                where = ".".join(str(p) for p in item.get("loc", ()))
                parts.append(f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", "")))
        return "; ".join(parts) or str(detail)
    return "" if detail is None else str(detail)
