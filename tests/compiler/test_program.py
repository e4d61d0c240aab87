"""A program's launches bind their parameters to its arguments and workspaces, and nothing else."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.codegen import render_program
from compiler.ir import f32, i32, kernel, lower, threadIdx
from compiler.ir.kernel import Kernel
from compiler.program import Launch, Program, Workspace, launch_arguments


def _copy(name: str, n: int = 32) -> object:
    with kernel(name, block=n) as k:
        src = k.tensor("src", f32, (n,), const=True)
        dst = k.tensor("dst", f32, (n,))
        k.scalar("scale")
        dst[threadIdx.x] = src[threadIdx.x]
    return lower(k.kernel)


def _two_pass() -> Program:
    first, second = _copy("first"), _copy("second")
    return Program("chain", ("x", "y"), (Launch(first, ("x", "tmp", 1)), Launch(second, ("tmp", "y", 2))),
                   (Workspace("tmp", (32,), "float32"),))


def test_launches_share_one_buffer_per_name_so_writes_carry_over() -> None:
    program = _two_pass()
    buffers = {"x": np.zeros(32, np.float32), "y": np.zeros(32, np.float32), "tmp": np.zeros(32, np.float32)}
    first, second = launch_arguments(program, buffers)
    assert first[1] is second[0] is buffers["tmp"]
    assert (first[2], second[2]) == (1, 2)
    assert [s.entry for s in render_program(program)] == ["first", "second"]
    assert program.dtype_of("tmp") == "float32"


def test_a_missing_buffer_is_named() -> None:
    with pytest.raises(ValueError, match="no buffer given for \\['tmp'\\]"):
        launch_arguments(_two_pass(), {"x": np.zeros(32), "y": np.zeros(32)})


@pytest.mark.parametrize(("arguments", "bindings", "workspaces", "message"), [
    (("x", "y"), ("x", "z", 1), (), "binds 'z', which is neither an argument nor a workspace"),
    (("x", "y", "w"), ("x", "y", 1), (), "no launch uses \\['w'\\]"),
    (("x", "y"), ("x", "y", "x"), (), "parameter 'scale' binds a scalar value"),
    (("x", "y"), (1, "y", 1), (), "parameter 'src' binds a buffer name"),
    (("x", "y"), ("x", "y", 1), (Workspace("x", (4,), "float32"),), "names repeat"),
    (("x", "y"), ("x", "y"), (), "3 parameters, 2 bindings"),
])
def test_bad_bindings_are_refused(arguments, bindings, workspaces, message) -> None:
    with pytest.raises(ValueError, match=message):
        Program("p", arguments, (Launch(_copy("k"), bindings),), workspaces)


def test_a_buffer_keeps_one_dtype_across_launches() -> None:
    with kernel("halves", block=32) as k:
        k.tensor("src", f32, (32,), const=True)
        k.tensor("dst", f32, (32,))
        k.scalar("scale")
    with kernel("ints", block=32) as k2:
        k2.tensor("src", i32, (32,), const=True)
    with pytest.raises(ValueError, match="'x' is float32 in one launch and int32 in ints"):
        Program("p", ("x", "y"), (Launch(lower(k.kernel), ("x", "y", 0)), Launch(lower(k2.kernel), ("x",))))


def test_single_takes_the_pointer_parameters_as_arguments() -> None:
    with kernel("fill", block=32) as k:
        y = k.tensor("y", f32, (32,))
        y[threadIdx.x] = 1.0
    program = Program.single(lower(k.kernel))
    assert program.arguments == ("y",) and program.workspaces == ()
    with pytest.raises(ValueError, match="no launches"):
        Program("empty", (), ())


def _slots_kernel(host_max_workers: int | None) -> Kernel:
    with kernel("packs", block=1, grid=8, host_max_workers=host_max_workers) as k:
        k.tensor("scratch", f32, (4, 16))
    return lower(k.kernel)


def test_a_workspace_with_a_slot_per_worker_is_cut_to_the_launchs_threads() -> None:
    scratch = Workspace("scratch", (4, 16), "float32", per_worker=True)
    assert [scratch.allocated_shape(w) for w in (1, 2, 4, 64)] == [(1, 16), (2, 16), (4, 16), (4, 16)]
    assert Workspace("tmp", (4, 16), "float32").allocated_shape(2) == (4, 16)  # the default: all of it
    with pytest.raises(ValueError, match="workers must be at least 1"):
        scratch.allocated_shape(0)
    with pytest.raises(ValueError, match="needs an axis for the slots"):
        Workspace("scalar", (), "float32", per_worker=True)


@pytest.mark.parametrize(("bound", "message"), [
    (None, "'scratch' has 4 slots, a slot per worker, but packs runs on as many threads as it is given"),
    (5, "'scratch' has 4 slots, a slot per worker, but packs runs on up to 5 threads"),
])
def test_a_slot_per_worker_needs_launches_that_bound_their_threads_by_the_slots(bound, message) -> None:
    # A launch on more threads than the slots would index past a scratch cut to its threads.
    scratch = Workspace("scratch", (4, 16), "float32", per_worker=True)
    with pytest.raises(ValueError, match=message):
        Program("p", (), (Launch(_slots_kernel(bound), ("scratch",)),), (scratch,))
    for fits in (4, 3):
        Program("p", (), (Launch(_slots_kernel(fits), ("scratch",)),), (scratch,))
    # Without the field nothing is cut, so any launch may use it, as before.
    Program("p", (), (Launch(_slots_kernel(None), ("scratch",)),), (Workspace("scratch", (4, 16), "float32"),))
