"""The Dockerfiles (no Docker engine here): pinned bases, non-root, real entry points, packages that match."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from geofed_apps.cli import build_parser
from geofed_operator import cloud_builders, site_builders
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
    assert users and users[-1] == str(cloud_builders.RUN_AS) == str(site_builders.RUN_AS)


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
