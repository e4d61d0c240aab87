# warpmap: NVRTC and the CUDA headers come from PyPI wheels; the image needs only the NVIDIA driver,
# which the container runtime (--gpus / NVIDIA Container Toolkit) mounts in. g++ builds emulator and
# cpu-target kernels.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ libgomp1 \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 warpmap
WORKDIR /opt/warpmap

COPY pyproject.toml README.md ./
COPY compiler ./compiler
COPY search ./search
COPY db ./db
COPY service ./service
COPY migrations ./migrations
RUN pip install --no-cache-dir '.[postgres]'

USER warpmap
ENV WARPMAP_CACHE_DIR=/home/warpmap/.cache/warpmap \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
ENTRYPOINT ["warpmap"]
CMD ["doctor"]
