# syntax=docker/dockerfile:1
# warpmap's image: the API (`warpmap serve`), the workers (`warpmap worker`) and every other command.
#
# NVRTC and the CUDA headers come from PyPI wheels inside the virtual environment, so the image carries no
# CUDA toolkit; the NVIDIA driver (libcuda) is the host's, mounted by the NVIDIA Container Toolkit into a
# container that is given a GPU (`--gpus`, or compose's device reservations). g++ stays in the runtime: the
# cpu target and the emulator compile kernels with the host compiler while tuning.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the package and its dependencies into a virtual environment --------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY compiler ./compiler
COPY search ./search
COPY db ./db
COPY service ./service
COPY migrations ./migrations
# The versions are pyproject.toml's (NVRTC is pinned there); this installs the local package, not a name.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir '.[postgres]' \
    && warpmap --version

# --- runtime: the environment, the host compiler, a user without privileges ----------------------------
FROM ${PYTHON_IMAGE} AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ libgomp1 \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 warpmap \
    && useradd --system --uid 10001 --gid warpmap --create-home --home-dir /home/warpmap warpmap \
    && mkdir -p /var/cache/warpmap /var/lib/warpmap \
    && chown warpmap:warpmap /var/cache/warpmap /var/lib/warpmap
COPY --from=build /opt/venv /opt/venv
# Compiled kernels go to WARPMAP_CACHE_DIR; the embedded SQLite database (plain `warpmap serve`) to
# $XDG_DATA_HOME/warpmap. Mount volumes on both to keep them. NVIDIA_VISIBLE_DEVICES is deliberately not
# set: a container sees only the GPUs it is given, never all of them by default.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    WARPMAP_CACHE_DIR=/var/cache/warpmap \
    XDG_DATA_HOME=/var/lib \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
WORKDIR /home/warpmap
EXPOSE 8000
# /healthz answers while the process serves; `warpmap worker` containers turn this off (compose file).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
ENTRYPOINT ["warpmap"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
