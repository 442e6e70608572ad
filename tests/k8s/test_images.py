"""The Dockerfiles (no Docker engine here): pinned bases, non-root, real entry points, packages that match."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from geofed_apps.cli import build_parser
from geofed_operator import k8s_types
from geofed_operator.settings import OperatorSettings

REPO = Path(__file__).resolve().parents[2]
IMAGES = {name: REPO / "images" / f"{name}.Dockerfile" for name in ("ps", "client", "operator")}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
REQUIREMENTS = {canonicalize_name(Requirement(r).name): Requirement(r) for r in PYPROJECT["project"]["dependencies"]}
FIRST_PARTY = {"geofed", "geofed_operator", "ps_server", "client_agent"}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def args_defaults(path: Path) -> dict[str, str]:
    return dict(a.split("=", 1) for op, a in instructions(path) if op == "ARG" and "=" in a)


def resolve(value: str, defaults: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], value)


def final_stage(path: Path) -> list[tuple[str, str]]:
    ops = instructions(path)
    start = max(i for i, (op, _) in enumerate(ops) if op == "FROM")
    return ops[start:]


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_base_images_are_pinned(name: str) -> None:
    path = IMAGES[name]
    defaults = args_defaults(path)
    for op, arg in instructions(path):
        if op == "FROM":
            image = resolve(arg.split()[0], defaults)
            repo, _, tag = image.rpartition(":")
            assert repo and tag and tag != "latest" and re.search(r"\d+\.\d+", tag), image


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_runs_as_the_non_root_user_the_pods_expect(name: str) -> None:
    users = [arg for op, arg in final_stage(IMAGES[name]) if op == "USER"]
    assert users and users[-1] == str(k8s_types.RUN_AS)


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_python_version_satisfies_the_project(name: str) -> None:
    version = args_defaults(IMAGES[name])["PYTHON_VERSION"]
    assert version in SpecifierSet(PYPROJECT["project"]["requires-python"]) or f"{version}.0" in SpecifierSet(
        PYPROJECT["project"]["requires-python"]
    )
    assert version.startswith(f"{sys.version_info.major}.{sys.version_info.minor}")  # the version CI tests with


def _entry(name: str) -> list[str]:
    ops = final_stage(IMAGES[name])
    entry = json.loads(next(a for op, a in reversed(ops) if op == "ENTRYPOINT"))
    cmd = json.loads(next(a for op, a in reversed(ops) if op == "CMD"))
    return entry + cmd


def test_entry_points_are_real() -> None:
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    ps = _entry("ps")
    assert ps[0] in PYPROJECT["project"]["scripts"] and ps[1] in subcommands and ps[1] == "ps"
    client = _entry("client")
    assert client[0] == "torchrun" and importlib.util.find_spec(client[client.index("-m") + 1] + ".__main__")
    operator = _entry("operator")
    assert operator[:3] == ["python", "-m", "geofed_operator"] and importlib.util.find_spec("geofed_operator.__main__")
    assert operator[3] == "operator"


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_copied_sources_exist_and_tags_match_the_operator_defaults(name: str) -> None:
    for op, arg in instructions(IMAGES[name]):
        if op == "COPY" and not arg.startswith("--from"):
            for src in arg.split()[:-1]:
                assert (REPO / src).exists(), src
    defaults = OperatorSettings()
    tag = {"ps": defaults.ps_image, "client": defaults.client_image}.get(
        name, f"ghcr.io/geofed/operator:{PYPROJECT['project']['version']}"
    )
    assert f"-t {tag} " in IMAGES[name].read_text()


def _pins(name: str) -> dict[str, str]:
    text = " ".join(arg for op, arg in instructions(IMAGES[name]) if op == "RUN")
    return {canonicalize_name(n): v for n, v in re.findall(r"([A-Za-z0-9_.-]+)==([0-9][^\s\\]*)", text)}


def test_pinned_packages_are_project_dependencies_at_allowed_versions() -> None:
    constraints = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().split() if "==" in line)
    pins = {**{canonicalize_name(k): v for k, v in constraints.items()}, **_pins("operator")}
    for dist, version in pins.items():
        assert dist in REQUIREMENTS, f"{dist} is installed in an image but not declared in pyproject.toml"
        assert REQUIREMENTS[dist].specifier.contains(version, prereleases=True), (dist, version)


def _third_party_imports() -> set[str]:
    """Top-level third-party modules the operator's code (and the geofed modules it uses) imports."""
    seen_files: set[Path] = set()
    todo = sorted((REPO / "operator").rglob("*.py"))
    modules: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen_files:
            continue
        seen_files.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level:  # relative: same package
                base = path.parent
                target = base / f"{node.module}.py" if node.module else None
                todo += [t for t in [target] if t and t.exists()]
                todo += [base / f"{a.name}.py" for a in node.names if (base / f"{a.name}.py").exists()]
                continue
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "geofed":
                    file = REPO / (name.replace(".", "/") + ".py")
                    todo += [file] if file.exists() else [REPO / name.replace(".", "/") / "__init__.py"]
                elif top not in FIRST_PARTY and top not in sys.stdlib_module_names and top != "__future__":
                    modules.add(name if top == "google" else top)
    return modules


def test_operator_image_installs_what_the_operator_imports() -> None:
    mapping = importlib.metadata.packages_distributions()
    needed = {canonicalize_name(d) for m in _third_party_imports() for d in mapping.get(m.split(".")[0], [])}
    needed &= set(REQUIREMENTS)  # grpc maps to several distributions; only grpcio is a dependency
    assert needed, "the scan found the operator's imports"
    assert needed <= set(_pins("operator")), needed - set(_pins("operator"))


SOURCES = ("geofed", "ps_server", "client_agent", "operator", "geofed_apps", "README.md")


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_dependencies_install_before_the_sources_are_copied(name: str) -> None:
    """A code change must not reinstall torch: every pip install of dependencies precedes the source COPYs."""
    ops = instructions(IMAGES[name])
    first_source = min(
        i for i, (op, arg) in enumerate(ops) if op == "COPY" and any(s in arg.split()[:-1] for s in SOURCES)
    )
    installs = [i for i, (op, arg) in enumerate(ops) if op == "RUN" and "pip install" in arg]
    after = [ops[i][1] for i in installs if i > first_source]
    assert after and all("--no-deps" in arg for arg in after), after
    assert any(i < first_source for i in installs)


def _dockerignore_allows(path: str) -> bool:
    """Docker's rule: the last pattern matching `path` (or a parent of it) decides; `!` re-includes."""
    allowed = True
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate, pattern = line.startswith("!"), line.lstrip("!")
        regex = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        if re.fullmatch(regex, path) or re.fullmatch(regex + "/.*", path):
            allowed = negate
    return allowed


def test_dockerignore_sends_sources_and_keeps_local_state_out() -> None:
    for name in IMAGES:
        for op, arg in instructions(IMAGES[name]):
            if op == "COPY" and not arg.startswith("--from"):
                for src in arg.split()[:-1]:
                    assert _dockerignore_allows(src) and _dockerignore_allows(f"{src}/x.py" if "." not in src else src)
    private = [".venv/bin/python", ".git/config", "runs/demo/ckpt.safetensors", "tests/k8s/conftest.py",
               "bench/results.json", "geofed/__pycache__/config.pyc", "admin.token", "site.yaml"]  # fmt: skip
    assert not [p for p in private if _dockerignore_allows(p)]


# What the PS image installs, by import name (the distributions' own dependencies come with them).
PS_IMPORTS = {"grpc", "grpc_health", "google", "pydantic", "prometheus_client", "numpy", "constriction", "numba",
              "yaml", "safetensors", "dp_accounting"}  # fmt: skip


def test_ps_image_has_no_torch_and_pins_what_the_ps_imports() -> None:
    pins = _pins("ps")
    assert not {"torch", "transformers", "peft", "accelerate"} & set(pins)
    mapping = importlib.metadata.packages_distributions()
    wanted = {canonicalize_name(d) for m in PS_IMPORTS for d in mapping.get(m, [])} & set(REQUIREMENTS)
    assert wanted == set(pins), wanted ^ set(pins)
    for dist, version in pins.items():
        assert REQUIREMENTS[dist].specifier.contains(version, prereleases=True), (dist, version)


def _closure(dists: set[str]) -> set[str]:
    """The distributions and everything they require (what pip would install for them)."""
    seen: set[str] = set()
    todo = list(dists)
    while todo:
        dist = canonicalize_name(todo.pop())
        if dist in seen:
            continue
        seen.add(dist)
        for req in importlib.metadata.requires(dist) or []:
            parsed = Requirement(req)
            if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
                todo.append(parsed.name)
    return seen


BLOCKER = """
import importlib.abc, importlib.machinery, sys
allowed = set(sys.argv[1].split(","))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in allowed or top in sys.stdlib_module_names or "." in name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(top)
        if spec is None or "site-packages" not in str(spec.origin):  # the standard library's private modules
            return None
        raise ImportError(f"{top} is not in the PS image")
sys.meta_path.insert(0, Blocker())
from geofed_apps.cli import main
sys.argv = ["geofed", *sys.argv[2:]]
sys.exit(main(sys.argv[1:]))
"""


def test_the_ps_runs_with_only_the_ps_image_packages(tmp_path: Path) -> None:
    """`geofed ps` starts and answers the probe with torch, transformers, kopf... unimportable."""
    import subprocess
    import time

    dists = _closure({d for m in PS_IMPORTS for d in importlib.metadata.packages_distributions().get(m, [])})
    mapping = importlib.metadata.packages_distributions()
    allowed = {m for m, ds in mapping.items() if {canonicalize_name(d) for d in ds} & dists}
    allowed |= FIRST_PARTY | {"geofed_apps", "_distutils_hack", "__editable___geofed_0_1_0_finder"}
    ready = tmp_path / "ready"
    cmd = [sys.executable, "-c", BLOCKER, ",".join(sorted(allowed)), "ps", "--insecure", "--port", "0",
           "--metrics-port", "0", "--status-port", "0", "--ready-file", str(ready),
           "--checkpoint-dir", str(tmp_path / "ckpt"), "--admin-token-file", str(tmp_path / "admin")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the PS did not start"
            time.sleep(0.1)
        probe = [sys.executable, "-c", BLOCKER, ",".join(sorted(allowed)), "ps", "--help"]
        assert subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
        health = [sys.executable, "-m", "ps_server.probe", "--port", ready.read_text().strip(), "--insecure"]
        assert subprocess.run(health, capture_output=True, timeout=60).returncode == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# The oldest driver branch the managed GPU node pools still ship (EKS and AKS GPU images, GKE's default):
# R535, whose CUDA version is 12.2.
OLDEST_POOL_DRIVER_CUDA = (12, 2)


def _cuda_version(text: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", text).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def test_the_client_image_starts_on_the_drivers_managed_gpu_pools_ship() -> None:
    """The NVIDIA container runtime refuses a container whose NVIDIA_REQUIRE_CUDA the node's driver does not meet;
    an nvidia/cuda:X.Y base requires cuda>=X.Y unless the image sets its own requirement."""
    ops = final_stage(IMAGES["client"])
    defaults = args_defaults(IMAGES["client"])
    env: dict[str, str] = {}
    for op, arg in ops:
        if op == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(arg))
    base = resolve(ops[0][1].split()[0], defaults)
    required = env.get("NVIDIA_REQUIRE_CUDA")
    if required is None and base.startswith("nvidia/cuda:"):
        required = "cuda>=" + base.split(":", 1)[1]
    assert required is not None, "no CUDA requirement: a node with a CUDA 11 driver would start it and fail later"
    needs = _cuda_version(required.split(">=", 1)[1])
    assert needs <= OLDEST_POOL_DRIVER_CUDA, f"{required} refuses R535 nodes"
    # Minor-version compatibility holds within one CUDA major: torch's build must be of the major required.
    torch_cuda = re.search(r"/cu(\d+)(\d)$", defaults["TORCH_INDEX"])
    assert torch_cuda and int(torch_cuda.group(1)) == needs[0] == int(defaults["TORCH_CUDA_MAJOR"])
    assert "compute" in env.get("NVIDIA_DRIVER_CAPABILITIES", "").split(",")  # libcuda mounted, not only nvidia-smi
