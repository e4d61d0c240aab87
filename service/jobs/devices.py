"""The devices of this machine as executors see them: a target, its queue and its cache identity.

A job's ``queue`` is the kind of device it must run on: every worker measuring on the same kind of
device (same model and arch under the same driver) takes jobs from one queue, so identical GPUs share
their work and a job never lands on a device whose timings would be filed under another's key.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket

from compiler.backends import Target, get_target
from db.records import DeviceInfo, ToolchainInfo
from search.records import cache_identity
from service.jobs.runner import WorkerIdentity
from service.tuning import warpmap_version

_TARGET = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


class TargetError(ValueError):
    """A ``--target`` that names no device this machine can run kernels on."""


def parse_target(text: str) -> tuple[str, int | None]:
    """``"cpu"`` -> ("cpu", None); ``"cuda"`` -> ("cuda", None); ``"cuda:1"`` -> ("cuda", 1)."""
    match = _TARGET.match(text.strip())
    if match is None or (match[1] == "cpu" and match[2] is not None):
        raise TargetError(f"--target must be cpu, cuda or cuda:N (a GPU's ordinal), got {text!r}")
    return match[1], None if match[2] is None else int(match[2])


def queue_name(kind: str, device: DeviceInfo) -> str:
    """``<kind>:<arch>:<8 hex digits of the device key>``, e.g. ``cpu:x86_64-avx512:1a2b3c4d``."""
    digest = hashlib.sha256(device.key.encode()).hexdigest()[:8]
    return f"{kind}:{device.arch}:{digest}"


def open_target(text: str) -> tuple[Target, str]:
    """The target ``text`` names, ready to measure, and its canonical name.

    ``cuda:N`` pins this process to GPU N (``CUDA_VISIBLE_DEVICES``) before CUDA is initialised, so the
    target's device 0 is that GPU here and in the measuring processes it spawns (which inherit the
    environment; spawned, never forked: CUDA does not survive a fork).
    """
    kind, ordinal = parse_target(text)
    if ordinal is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(ordinal)
    target = get_target(kind)
    reason = target.unavailable_reason()
    if reason is not None:
        raise TargetError(f"target {text!r} cannot run kernels here: {reason}")
    return target, kind if ordinal is None else f"{kind}:{ordinal}"


def identity(target: Target, name: str, target_name: str) -> WorkerIdentity:
    """The worker ``name`` measuring on ``target``: its queue, device and toolchain."""
    device, toolchain = target_identity(target)
    kind = parse_target(target_name)[0]
    return WorkerIdentity(name=name, target=target_name, queue=queue_name(kind, device), device=device,
                          toolchain=toolchain)


def target_identity(target: Target) -> tuple[DeviceInfo, ToolchainInfo]:
    """The cache's device and toolchain for kernels this target measures."""
    return cache_identity(target.fingerprint(), warpmap_version())


def local_target_names() -> list[str]:
    """What ``warpmap serve`` runs in-process: the GPU when the cuda target can run here, else the host.

    One GPU only: the cuda target drives its device 0, and a process has one ``CUDA_VISIBLE_DEVICES``;
    more GPUs are served by one ``warpmap worker --target cuda:N`` process each.
    """
    return ["cuda"] if get_target("cuda").unavailable_reason() is None else ["cpu"]


def default_worker_name(target_name: str) -> str:
    """``<host>:<pid>:<target>``: unique per process, readable in ``GET /v1/devices``."""
    return f"{socket.gethostname()}:{os.getpid()}:{target_name}"
