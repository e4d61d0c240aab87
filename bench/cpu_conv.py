"""conv2d on the cpu target against torch and numpy, on ResNet-50 layers (batch 1), interleaved in one run.

For each layer and layout: a short sweep of the cpu conv2d template's level-2 space (the default
schedule, its family of register tiles blocked the same way, and a seeded sample; every candidate's
output is checked against the float64 reference before it is timed; the three fastest are timed
again, interleaved) picks the fastest schedule.
Then, round after round, the default schedule, that best one, ``torch.nn.functional.conv2d`` (the
CPU build, all cores; NHWC as torch's channels_last memory format) and numpy (im2col through a
strided view, then ``matmul`` on OpenBLAS) are each timed under the same protocol. Our figure is the
whole program: the two packing launches and the GEMM, called back to back, as a caller would run it.
The table shows GFLOP/s (2 * n*p*q * k * c*r*s flops) as the median over all samples with p20/p80,
the speed-up of the best schedule over each peer and over the default, and the best as a fraction of
the machine's estimated FP32 peak (from /proc/cpuinfo's clock, which may be below the real one).

``--pack-ab`` instead times, for each layer and layout, which launch packs the patches: the default
schedule with a launch of their own and with the compute launch packing them block by block
(``patches_inside``), each also with K in steps of at most 192, interleaved; GFLOP/s median [p20, p80].

``--launches`` times each launch of the default schedule's program alone (packing the patches, packing
the weight, the GEMM), interleaved: where a layer's time goes.

Usage: ``python bench/cpu_conv.py [--rounds 3] [--sweep 8] [--layout NCHW|NHWC|both] [--layers 0,1,2,3,4]
[--pack-ab | --launches]``
(``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` are honoured as set; unset them in the command to let
OpenBLAS pick its kernel.)
"""

from __future__ import annotations

import os

# Three thread pools take turns (OpenMP's for our launches, torch's, OpenBLAS's): spinning idle OpenMP
# workers would compete with the others for the same cores (see bench/cpu_kernel_speed.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# OpenMP threads bound one to a CPU, as in a tuning's measuring process (search.tune.MEASURING_ENVIRONMENT):
# unbound, another process busy on one core could leave two of a kernel's threads on the other core,
# each spinning for its peer, and every call waited out scheduler ticks (README, "Measured", a busy host).
os.environ.setdefault("OMP_PROC_BIND", "true")

import argparse
import dataclasses
from collections.abc import Callable

import numpy as np

from compiler.backends import cpu
from compiler.backends.cpu_target import CpuTarget
from compiler.backends.timing import Protocol, measure, percentile
from compiler.cpu_device import CpuDevice, detect_cpu
from compiler.numeric import poisoned, relative_error, tolerance
from compiler.ops.conv2d_spec import Conv2dSpec, conv2d_flops, conv2d_inputs, conv2d_reference
from compiler.ops.cpu import conv2d
from compiler.ops.cpu.conv_pack import im2col
from compiler.program import Program
from service.cli.table import format_table

LAYERS: tuple[tuple[str, dict[str, object]], ...] = (
    ("56x56x64->64 3x3", {"c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "padding": (1, 1)}),
    ("28x28x128->128 3x3", {"c": 128, "h": 28, "w": 28, "k": 128, "r": 3, "s": 3, "padding": (1, 1)}),
    ("14x14x256->256 3x3", {"c": 256, "h": 14, "w": 14, "k": 256, "r": 3, "s": 3, "padding": (1, 1)}),
    ("56x56x64->256 1x1", {"c": 64, "h": 56, "w": 56, "k": 256, "r": 1, "s": 1}),
    ("7x7x512->512 3x3", {"c": 512, "h": 7, "w": 7, "k": 512, "r": 3, "s": 3, "padding": (1, 1)}),
)

Call = Callable[[], object]


def launch_calls(program: Program, inputs: dict[str, np.ndarray], y: np.ndarray,
                 config: cpu.CpuConfig) -> list[tuple[str, Call]]:
    """Each launch of ``program`` as a call of its own on fixed buffers, by kernel name, in order: the
    tuner's cpu target compiles, loads and binds them (workspaces poisoned, arguments checked once)."""
    target = CpuTarget(config=config)
    calls = target.launch_calls(target.build(program), {**inputs, "y": y})
    return [(launch.kernel.name, call) for launch, call in zip(program.launches, calls, strict=True)]


def program_call(program: Program, inputs: dict[str, np.ndarray], y: np.ndarray,
                 config: cpu.CpuConfig) -> Call:
    """One call running every launch of ``program`` in order on fixed buffers, as the tuner times it."""
    target = CpuTarget(config=config)
    return target.call(target.build(program), {**inputs, "y": y})


def torch_call(spec: Conv2dSpec, inputs: dict[str, np.ndarray], reference: np.ndarray) -> Call | None:
    """``torch.nn.functional.conv2d`` on the same memory (None without torch); its result is checked once."""
    try:
        import torch
        import torch.nn.functional as functional
    except ImportError:
        return None
    torch.set_num_threads(cpu.CpuConfig.default().workers)
    x, weight = torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["weight"])
    if spec.layout == "NHWC":  # the same memory, seen as NCHW tensors in channels_last format
        x, weight = x.permute(0, 3, 1, 2), weight.permute(0, 3, 1, 2)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return functional.conv2d(x, weight, stride=spec.stride, padding=spec.padding, dilation=spec.dilation)

    got = run().numpy()  # NCHW, or an NCHW view of channels_last memory
    if spec.layout == "NHWC":
        got = got.transpose(0, 2, 3, 1)
    error = relative_error(got.astype(np.float64), reference)
    if error > 1e-4:
        raise SystemExit(f"{spec}: torch disagrees with the reference (relative error {error:.3g})")
    return run


def numpy_call(spec: Conv2dSpec, inputs: dict[str, np.ndarray]) -> Call:
    x, weight = inputs["x"], inputs["weight"].reshape(spec.k, -1)

    def run() -> np.ndarray:
        cols = im2col(spec, x)
        return np.matmul(weight, cols) if spec.layout == "NCHW" else np.matmul(cols, weight.T)

    return run


def candidates(spec: Conv2dSpec, device: CpuDevice, sample: int) -> list[conv2d.ConvSchedule]:
    """The default schedule, the family of register tiles it belongs to (each blocked the same way, each
    NCHW pack mode, and with KC cut to half the L1d), and ``sample`` more drawn from the level-2 space
    with a fixed seed: all valid level-2 schedules, without repeats."""
    lanes = device.f32_lanes
    space = conv2d.space(spec, device, 2)
    found = [conv2d.default_schedule(spec, device)]
    l1 = device.l1d.size_bytes if device.l1d else 32 << 10
    for mr, nr in ((8, 2 * lanes), (12, 2 * lanes), (14, 2 * lanes), (6, 3 * lanes), (8, 3 * lanes),
                   (14, lanes), (10, 2 * lanes)):
        for mode in conv2d.pack_modes(spec):
            found.append(conv2d.sized_schedule(spec, device, mr, nr, mode))
        # The BLIS rule: the KC x NR panel of B in about half the L1d.
        found.append(conv2d.sized_schedule(spec, device, mr, nr, max_kc=max(64, l1 // 2 // (4 * nr))))
    # Each of those with the compute launch packing the patches.
    found += [dataclasses.replace(s, patches_inside=True) for s in found]
    found += space.sample(sample, seed=0)
    unique = list(dict.fromkeys(found))
    return [s for s in unique if space.violation(s) is None]


def checked_call(spec: Conv2dSpec, schedule: conv2d.ConvSchedule, inputs: dict[str, np.ndarray],
                 reference: np.ndarray, config: cpu.CpuConfig) -> Call:
    """The call of ``schedule``'s program, run once first on a poisoned output and checked against the
    reference: a wrong schedule stops the run."""
    y = poisoned(spec.y_shape, "float32")
    call = program_call(conv2d.build(spec, schedule), inputs, y, config)
    call()
    error = relative_error(y.astype(np.float64), reference)
    if error > tolerance("float32", spec.c * spec.r * spec.s):
        raise SystemExit(f"{spec}: schedule {schedule} is wrong (relative error {error:.3g})")
    return call


def sweep(spec: Conv2dSpec, device: CpuDevice, inputs: dict[str, np.ndarray], reference: np.ndarray,
          count: int, config: cpu.CpuConfig) -> tuple[conv2d.ConvSchedule, int]:
    """The fastest of :func:`candidates` and how many were tried. Each is checked against the reference
    (one that is wrong stops the run) and timed once briefly; the three fastest are timed again in
    interleaved rounds, so one lucky or unlucky moment on a shared machine does not pick the winner."""
    tried = candidates(spec, device, count)
    quick = Protocol(warmup_ms=10, min_repetitions=5, target_ms=50)
    timed: list[tuple[float, conv2d.ConvSchedule, Call]] = []
    for schedule in tried:
        call = checked_call(spec, schedule, inputs, reference, config)
        timed.append((measure(call, quick).median_ns, schedule, call))
    finalists = sorted(timed, key=lambda t: t[0])[:3]
    samples = _interleaved({str(i): call for i, (_, _, call) in enumerate(finalists)}, 3, quick)
    best = min(range(len(finalists)), key=lambda i: percentile(samples[str(i)], 50))
    return finalists[best][1], len(tried)


def _interleaved(calls: dict[str, Call], rounds: int, protocol: Protocol) -> dict[str, list[int]]:
    samples: dict[str, list[int]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name] += measure(call, protocol).samples_ns
    return samples


def _gflops(flops: int, samples_ns: list[int]) -> tuple[float, float, float]:
    rates = [flops / s for s in samples_ns]
    return percentile(rates, 50), percentile(rates, 20), percentile(rates, 80)


def pack_ab(device: CpuDevice, layers: list[int], layouts: tuple[str, ...], rounds: int,
            config: cpu.CpuConfig) -> None:
    """``--pack-ab``: the patches packed by a launch of their own or inside the compute launch."""
    protocol = Protocol(warmup_ms=20, min_repetitions=10, target_ms=100)
    names = ("launch", "inside", "launch, KC <= 192", "inside, KC <= 192")
    header = ["layer (batch 1)", "layout", "pack mode", "KC", "default", *names, "inside/launch (best of each)"]
    rows = []
    for index, layout in ((i, layout) for i in layers for layout in layouts):
        label, fields = LAYERS[index]
        spec = Conv2dSpec.model_validate({"n": 1, **fields, "layout": layout})
        inputs = conv2d_inputs(spec, np.random.default_rng(0))
        reference = conv2d_reference(spec, inputs)["y"]
        default = conv2d.default_schedule(spec, device)
        short = conv2d.sized_schedule(spec, device, default.mr, default.nr, default.pack_mode, max_kc=192)
        schedules = tuple(dataclasses.replace(schedule, patches_inside=inside)
                          for schedule in (default, short) for inside in (False, True))
        calls = {name: checked_call(spec, schedule, inputs, reference, config)
                 for name, schedule in zip(names, schedules, strict=True)}
        samples = _interleaved(calls, rounds, protocol)
        rates = {name: _gflops(conv2d_flops(spec), samples[name]) for name in names}
        best_inside = max(rates[n][0] for n in names if n.startswith("inside"))
        best_launch = max(rates[n][0] for n in names if n.startswith("launch"))
        rows.append([label, layout, default.pack_mode, f"{default.kc} / {short.kc}",
                     "inside" if default.patches_inside else "launch",
                     *(f"{m:.1f} [{lo:.1f}, {hi:.1f}]" for m, lo, hi in rates.values()),
                     f"{best_inside / best_launch:.2f}x"])
        print(format_table(header, rows[-1:]), flush=True)
    print(f"{device.model}, {device.isa_summary}, {config.workers} workers, {rounds} interleaved rounds, "
          f"uptime load {os.getloadavg()[0]:.2f}")
    print(format_table(header, rows))


def launch_shares(device: CpuDevice, layers: list[int], layouts: tuple[str, ...], rounds: int,
                  config: cpu.CpuConfig) -> None:
    """``--launches``: each launch of the default schedule's program timed alone (after one run of the
    whole program, so its inputs are in place), interleaved; median microseconds and the share of their sum."""
    protocol = Protocol(warmup_ms=20, min_repetitions=10, target_ms=100)
    rows = []
    for index in layers:
        label, fields = LAYERS[index]
        for layout in layouts:
            spec = Conv2dSpec.model_validate({"n": 1, **fields, "layout": layout})
            program = conv2d.build(spec, conv2d.default_schedule(spec, device))
            calls = launch_calls(program, conv2d_inputs(spec, np.random.default_rng(0)),
                                 np.empty(spec.y_shape, np.float32), config)
            for _, call in calls:
                call()
            samples = _interleaved(dict(calls), rounds, protocol)
            medians = {name: percentile(s, 50) / 1e3 for name, s in samples.items()}
            total = sum(medians.values())
            rows.append([label, layout, "; ".join(f"{name} {us:.0f} us ({us / total:.0%})"
                                                  for name, us in medians.items())])
    print(f"{device.model}, {config.workers} workers, {rounds} interleaved rounds, uptime load "
          f"{os.getloadavg()[0]:.2f}")
    print(format_table(["layer (batch 1)", "layout", "each launch of the default schedule alone"], rows))


def _layer_indices(text: str) -> list[int]:
    """``--layers``: a bad index is argparse's one-line error (exit status 2), not a traceback."""
    try:
        indices = [int(i) for i in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated integers: {text!r}") from None
    if not all(0 <= i < len(LAYERS) for i in indices):
        raise argparse.ArgumentTypeError(f"layer indices run from 0 to {len(LAYERS) - 1}, got {text!r}")
    return indices


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sweep", type=int, default=8, help="random level-2 schedules added per layer")
    parser.add_argument("--layout", choices=("NCHW", "NHWC", "both"), default="both")
    parser.add_argument("--layers", type=_layer_indices, default=list(range(len(LAYERS))),
                        help=f"indices into the layer list, comma-separated (0 to {len(LAYERS) - 1})")
    parser.add_argument("--pack-ab", action="store_true", help="which launch packs the patches")
    parser.add_argument("--launches", action="store_true", help="each launch of the default schedule alone")
    args = parser.parse_args(argv)
    device = detect_cpu()
    config = cpu.CpuConfig.default()  # the kernel cache: a second run compiles nothing
    layers = args.layers
    layouts = ("NCHW", "NHWC") if args.layout == "both" else (args.layout,)
    if args.pack_ab:
        pack_ab(device, layers, layouts, args.rounds, config)
        return
    if args.launches:
        launch_shares(device, layers, layouts, args.rounds, config)
        return
    protocol = Protocol(warmup_ms=20, min_repetitions=10, target_ms=100)
    peak = device.peak_gflops_f32
    rows, picks = [], []
    for index in layers:
        label, fields = LAYERS[index]
        for layout in layouts:
            spec = Conv2dSpec.model_validate({"n": 1, **fields, "layout": layout})
            inputs = conv2d_inputs(spec, np.random.default_rng(0))
            reference = conv2d_reference(spec, inputs)["y"]
            best, tried = sweep(spec, device, inputs, reference, args.sweep, config)
            default = conv2d.default_schedule(spec, device)
            calls = {
                "default": program_call(conv2d.build(spec, default), inputs, np.empty(spec.y_shape, np.float32),
                                        config),
                "best": program_call(conv2d.build(spec, best), inputs, np.empty(spec.y_shape, np.float32), config),
                "numpy": numpy_call(spec, inputs),
            }
            peer = torch_call(spec, inputs, reference)
            if peer is not None:
                calls["torch"] = peer
            samples = _interleaved(calls, args.rounds, protocol)
            flops = conv2d_flops(spec)
            rates = {name: _gflops(flops, s) for name, s in samples.items()}
            best_ns = percentile(samples["best"], 50)
            speedup = {name: percentile(s, 50) / best_ns for name, s in samples.items()}
            row = [label, layout]
            for name in ("default", "best", "torch", "numpy"):
                if name in rates:
                    median, p20, p80 = rates[name]
                    row.append(f"{median:.1f} [{p20:.1f}, {p80:.1f}]")
                else:
                    row.append("n/a")
            row += [f"{speedup['torch']:.2f}x" if "torch" in speedup else "n/a", f"{speedup['numpy']:.2f}x",
                    f"{speedup['default']:.2f}x", f"{rates['best'][0] / peak:.0%}" if peak else "n/a"]
            rows.append(row)
            picks.append(f"{label} {layout}: best of {tried}: {best}")
    print(f"{device.model}, {device.isa_summary}, {config.workers} workers, estimated FP32 peak "
          f"{peak:.0f} GFLOP/s at {device.clock_ghz} GHz ({device.clock_source}), {args.rounds} interleaved "
          f"rounds, uptime load {os.getloadavg()[0]:.2f}" if peak else f"{device.model}")
    print(format_table(["layer (batch 1)", "layout", "default GFLOP/s", "best GFLOP/s", "torch GFLOP/s",
                        "numpy GFLOP/s", "best/torch", "best/numpy", "best/default", "best/peak"], rows))
    print("\n".join(picks))


if __name__ == "__main__":
    main()
