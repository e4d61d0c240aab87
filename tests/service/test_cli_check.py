"""``warpmap check`` end to end through ``service.cli.main``: the matmul space on the emulator, bad specs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler.backends import get_target
from compiler.device import DeviceSpec, device_preset
from compiler.ops import get_operator
from compiler.space import Enumeration
from service.cli import check, main, specs

SPEC = '{"op":"matmul","m":67,"n":45,"k":83,"batch":3,"layout_a":"col"}'
Capture = pytest.CaptureFixture[str]


def test_a_sample_of_the_matmul_space_passes(capsys: Capture, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("WARPMAP_CACHE_DIR", str(tmp_path))  # compiled kernels go to a fresh cache
    assert main(["check", "--spec", SPEC, "--sample", "4"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith('matmul {"batch":3,"dtype":"float32","k":83,"layout_a":"col"')
    assert re.match(r"space matmul_simt level 1: 32 combinations, 24 valid \(rejected: 8 block tile", lines[1])
    assert lines[1].endswith("checking 4 on emu")
    assert re.fullmatch(r"4 schedule\(s\) to check, roughly \d+ s \(a rough estimate\)", lines[2])
    # Not a terminal: whole progress lines, no carriage returns.
    assert "\r" not in captured.err
    assert re.findall(r"checked (\d)/4", captured.err) == ["1", "2", "3", "4"]
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#"))
    for column in ("warps_m", "lanes_m", "block_k", "vector", "regs", "smem", "rel_err", "result"):
        assert column in lines[start]
    assert set(lines[start + 1]) == {"-", " "}  # the header's rule, in ASCII
    rows = lines[start + 2:-1]  # below the header's rule, above the summary
    assert len(rows) == 4 and all(re.search(r"\de-\d\d +pass", row) for row in rows), rows
    assert "\x1b" not in captured.out  # not a terminal: no colour
    assert lines[-1] == "4 passed, 0 failed, 0 pruned"


@pytest.mark.parametrize(("spec", "named"), [
    ('{"op":"matmul","m":0,"n":45,"k":83}', "m"),
    ('{"op":"matmul","m":4,"n":4,"k":4,"layout_b":"diagonal"}', "layout_b"),
    ('{"op":"matmul","m":4,"n":4,"k":4,"dtype":"float64"}', "dtype"),
    ('{"op":"matmul","m":4,"n":4}', "k"),
    ('{"op":"matmul","m":4,"n":4,"k":4,"colour":"red"}', "colour"),
    ('{"op":"matmull","m":4}', "matmull"),
    ('{"op":"matmul",', "not valid JSON"),
])
def test_bad_specs_exit_2_naming_the_problem(capsys: Capture, spec: str, named: str) -> None:
    assert main(["check", "--spec", spec]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("warpmap check: error:")
    assert named in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_a_bad_sample_size_exits_2(capsys: Capture) -> None:
    assert main(["check", "--spec", SPEC, "--sample", "0"]) == 2
    assert "--sample must be at least 1, got 0" in capsys.readouterr().err


def test_the_gpu_backend_without_a_gpu_says_why(capsys: Capture) -> None:
    if get_target("cuda").unavailable_reason() is None:
        pytest.skip("this machine has a GPU")
    assert main(["check", "--spec", '{"op": "matmul", "m": 8, "n": 8, "k": 8}', "--target", "cuda"]) == 2
    assert "target 'cuda' cannot run kernels here: no GPU" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--target", "--device"])
def test_the_target_flag_and_its_deprecated_spelling_pick_the_backend(flag: str, capsys: Capture) -> None:
    assert main(["check", "--spec", SPEC, "--sample", "1", flag, "emu"]) == 0
    captured = capsys.readouterr()
    assert "checking 1 on emu" in captured.out
    assert ("--device is deprecated; use --target emu" in captured.err) == (flag == "--device")


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--timeout", "0", "--timeout must be a number of seconds above 0, got 0.0"),
    ("--timeout", "-5", "--timeout must be a number of seconds above 0, got -5.0"),
    ("--timeout", "nan", "--timeout must be a number of seconds above 0, got nan"),
    ("--timeout", "inf", "--timeout must be a number of seconds above 0, got inf"),
    ("--seed", "-1", "--seed must be 0 or more, got -1"),
    ("--jobs", "0", "--jobs must be at least 1, got 0"),
])
def test_bad_options_exit_2_with_one_line(capsys: Capture, option: str, value: str, message: str) -> None:
    assert main(["check", "--spec", SPEC, option, value]) == 2
    err = capsys.readouterr().err
    assert err == f"warpmap check: error: {message}\n"


def test_a_spec_too_big_for_this_machines_memory_says_how_much_it_needs(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check, "available_memory_bytes", lambda: 1 << 30)
    spec = '{"op":"matmul","m":16384,"n":16384,"k":16384}'  # three 1 GiB tensors
    assert main(["check", "--spec", spec]) == 2
    err = capsys.readouterr().err
    needed = specs.host_bytes_needed(3 << 30, 3 << 28)
    assert err == (f"warpmap check: error: this spec needs about {needed / 2**30:.1f} GiB of host memory for its "
                   "inputs, outputs and float64 reference; 1.0 GiB is available\n")


def test_the_memory_estimate_is_not_below_what_numpy_allocates() -> None:
    # The inputs drawn in float64, the float64 reference and compared outputs, two storage copies.
    elements = 3 * 1000
    assert specs.host_bytes_needed(4 * elements, elements) >= 8 * elements * 2 + 4 * elements * 2


def test_available_memory_reads_memavailable(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    1000 kB\n")
    assert check.available_memory_bytes(meminfo) == 1000 * 1024
    assert check.available_memory_bytes(tmp_path / "absent") is not None  # falls back to sysconf


def test_a_long_check_says_so_up_front() -> None:
    line = check.eta_line(3648, "emu")
    assert "roughly 46 min (a rough estimate; --sample N" in line


class _Log:
    """A stand-in stream that is, or is not, a terminal."""

    def __init__(self, tty: bool) -> None:
        self.text, self.tty = "", tty

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_progress_in_a_log_is_one_line_per_twentieth_with_an_eta() -> None:
    log, clock = _Log(tty=False), [0.0]
    progress = check.progress_printer(100, log, now=lambda: clock[0])  # type: ignore[arg-type]
    for done in range(1, 101):
        clock[0] = 2.0 * done  # two seconds a schedule
        progress(done, None)  # type: ignore[arg-type]
    lines = log.text.splitlines()
    assert len(lines) == 20 and "\r" not in log.text
    assert lines[0] == "  checked 5/100 in 10 s, about 3 min left"
    assert lines[-1] == "  checked 100/100 in 3 min"


def test_progress_on_a_terminal_rewrites_one_line() -> None:
    log = _Log(tty=True)
    progress = check.progress_printer(3, log, now=lambda: 0.0)  # type: ignore[arg-type]
    for done in (1, 2, 3):
        progress(done, None)  # type: ignore[arg-type]
    assert log.text.count("\r") == 3 and "\n" not in log.text


class _WithSpace:
    """The matmul operator with another ``space``."""

    def __init__(self, space: object) -> None:
        self.space, self._operator = space, get_operator("matmul")

    def __getattr__(self, name: str) -> object:
        return getattr(self._operator, name)


class _EmptySpace:
    template = "matmul_simt"

    def enumerate(self) -> Enumeration[object]:
        return Enumeration(valid=(), rejected={"index width": 32})


def test_an_empty_space_is_exit_2_naming_what_ruled_each_schedule_out(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check, "get_operator", lambda _name: _WithSpace(lambda *_args: _EmptySpace()))
    assert main(["check", "--spec", SPEC]) == 2
    err = capsys.readouterr().err
    assert err.endswith("no schedule of space matmul_simt level 1 can serve this spec "
                        "(32 combinations, rejected: 32 index width)\n")


def test_a_space_that_refuses_the_spec_is_exit_2(capsys: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise ValueError("matmul: m = 16777216 needs 64-bit indices, which no level-1 template uses")

    monkeypatch.setattr(check, "get_operator", lambda _name: _WithSpace(refuse))
    assert main(["check", "--spec", SPEC]) == 2
    assert capsys.readouterr().err == ("warpmap check: error: matmul: m = 16777216 needs 64-bit indices, "
                                       "which no level-1 template uses\n")


def test_without_gpu_the_space_reads_this_machines_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    real = DeviceSpec(name="NVIDIA L4", arch="sm_89", sm_count=58, max_shared_dynamic=101_376)
    monkeypatch.setattr(check, "local_gpu_spec", lambda api=None: real)
    assert check.space_device(None) == real
    assert check.space_device("a100") == device_preset("a100")  # --gpu names a preset: it wins
    monkeypatch.setattr(check, "local_gpu_spec", lambda api=None: None)
    assert check.space_device(None) == device_preset("h200")  # no GPU here: the default preset
