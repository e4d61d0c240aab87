"""Targets, chosen by name: ``emu`` (CUDA templates checked on the CPU emulator), ``cuda`` (an NVIDIA GPU)
and ``cpu`` (the host, through its C++ dialect).

Each target is one module defining ``TARGET``, an object of the :class:`~compiler.backends.target.Target`
shape: ``compile(program)`` to an artifact (or a ``CompileFailure`` value), ``load``, ``run``, ``time``,
``device``, ``fingerprint`` and ``unavailable_reason``. Nothing outside a target asks which one it talks
to. Modules are imported on first use, so asking for the cpu target never loads the CUDA bindings.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from compiler.backends.target import Artifact, CompileFailure, LaunchBuild, Loaded, Target

__all__ = ["TARGETS", "Artifact", "CompileFailure", "LaunchBuild", "Loaded", "Target", "get_target"]

#: Target name -> the module that defines its ``TARGET``.
TARGETS: dict[str, str] = {
    "emu": "compiler.backends.emu.target",
    "cuda": "compiler.backends.cuda",
    "cpu": "compiler.backends.cpu_target",
}


def get_target(name: str, **settings: Any) -> Target:
    """The target called ``name``; ``settings`` replace fields of its default (``gpu=`` a DeviceSpec for
    the CUDA targets, ``config=`` for emu and cpu ...). A ValueError names the known targets."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(sorted(TARGETS))}")
    target: Target = importlib.import_module(TARGETS[name]).TARGET
    return dataclasses.replace(target, **settings) if settings else target  # type: ignore[type-var]
