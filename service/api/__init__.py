"""The HTTP API (FastAPI, under ``/v1``): tunings, kernels, devices, health, readiness and metrics.

``create_app(settings=None, *, dispatcher=None)`` builds the app; ``warpmap serve`` runs it under
uvicorn. See CONTRACT section 4 and the README's "The service API" for the endpoints.
"""

from service.api.app import create_app

__all__ = ["create_app"]
