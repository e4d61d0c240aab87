#!/usr/bin/env bash
# bench/gpu_check.py on a GPU machine that has no network and whose Python (3.12 by default) holds
# PyTorch, numpy, cuda-bindings, NVRTC, rich and tqdm but not warpmap's other dependencies: the
# wheels it lacks are fetched here, taken along with the checkout, and installed there beside it.
#
#   here:  bash bench/gpu_kit.sh fetch [PYTHON_VERSION]    # the wheels into .whl/ (git-ignored)
#   there: bash bench/gpu_kit.sh check [gpu_check options] # installs .whl/ into /tmp/warpmap-site, prints
#                                                          # the versions and the toolchain, runs the check
#
# The wheels are the versions installed beside the Python that runs `fetch` (the ones the suite ran
# with), so the GPU runs what the tests passed on. `check` writes its whole log to $OUT/gpu_check.log
# when OUT names a folder (else /tmp) and exits with gpu_check.py's status.
set -euo pipefail

#: Distributions warpmap imports for the check that the GPU image does not hold (their own needs included).
MISSING=(pydantic pydantic-core annotated-types typing-inspection optuna colorlog sqlalchemy greenlet alembic mako)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHEELS=$ROOT/.whl

fetch() {
    local version=${1:-3.12} python=${PYTHON:-$ROOT/.venv/bin/python}
    local pins
    pins=$("$python" - "${MISSING[@]}" <<'EOF'
import importlib.metadata as m, sys
print(" ".join(f"{name}=={m.version(name)}" for name in sys.argv[1:]))
EOF
)
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    # shellcheck disable=SC2086 # the pins are words
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$version" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --dest "$WHEELS" $pins
    du -sh "$WHEELS"
    echo "take .whl/ along with the checkout; there, run: bash bench/gpu_kit.sh check"
}

check() {
    local log=${OUT:-/tmp}/gpu_check.log site=/tmp/warpmap-site
    cd "$ROOT"
    python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$WHEELS"/*.whl
    export PYTHONPATH=$site:$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    set +e
    {
        date -u +"%Y-%m-%d %H:%M UTC"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
        python3 - <<'EOF'
import importlib.metadata as m, sys
names = ("numpy", "cuda-bindings", "cuda-pathfinder", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "torch",
         "optuna", "pydantic", "sqlalchemy", "rich")
found = []
for name in names:
    try:
        found.append(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:
        found.append(f"{name} -")
print(f"Python {sys.version.split()[0]}; " + ", ".join(found))
from compiler.toolchain import detect_cuda_headers, detect_nvrtc
print("NVRTC:", detect_nvrtc())
print("CUDA headers:", detect_cuda_headers())
EOF
        python3 bench/gpu_check.py "$@"
    } 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    echo "log: $log; exit status $status"
    return "$status"
}

case ${1:-} in
    fetch) shift; fetch "$@" ;;
    check) shift; check "$@" ;;
    *) echo "usage: bash bench/gpu_kit.sh fetch [PYTHON_VERSION] | check [gpu_check options]" >&2; exit 2 ;;
esac
