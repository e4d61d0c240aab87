"""``bench/gpu_kit.sh``: the wheels it takes to a GPU machine are every distribution ``bench/gpu_check.py``
imports that the machine's image does not hold, so the check runs there in one call."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "bench" / "gpu_kit.sh"

#: What the GPU machines' Python holds of what the check imports (an image with PyTorch, CUDA's Python
#: bindings and the usual scientific and terminal packages).
IMAGE = frozenset({"numpy", "cuda-bindings", "cuda-core", "cuda-pathfinder", "cuda-python", "packaging", "rich",
                   "tqdm", "typing-extensions", "setuptools", "markdown-it-py", "mdurl", "pygments", "pyyaml",
                   "markupsafe"})


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _kit_list() -> set[str]:
    found = re.search(r"^MISSING=\(([^)]*)\)", KIT.read_text(), re.M)
    assert found is not None, "bench/gpu_kit.sh has no MISSING=(...) list"
    return {_normal(name) for name in found.group(1).split()}


def test_the_kit_brings_what_the_check_imports_beyond_the_image() -> None:
    # A fresh interpreter, so that only the check's own imports are counted.
    probe = ("import importlib.metadata as m, json, sys; import gpu_check; "
             "owners = m.packages_distributions(); "
             "print(json.dumps(sorted({d for n in list(sys.modules) for d in owners.get(n.split('.')[0], [])})))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT / "bench", capture_output=True, text=True,
                          timeout=120, check=True)
    needed = {_normal(name) for name in json.loads(done.stdout.splitlines()[-1])} - {"warpmap"}
    assert {"optuna", "pydantic", "numpy"} <= needed  # the probe sees the check's imports
    assert needed - IMAGE - _kit_list() == set()
    # Nothing the image already has is carried (a second copy of a package could shadow the image's).
    assert _kit_list() & IMAGE == set()


def test_the_kit_says_how_to_use_it() -> None:
    done = subprocess.run(["bash", str(KIT)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert "usage: bash bench/gpu_kit.sh fetch" in done.stderr
