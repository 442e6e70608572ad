"""Generated and declared files stay in step with their sources."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_protobuf_code_is_current(tmp_path):
    (tmp_path / "geofed" / "protocol").mkdir(parents=True)
    proto = "geofed/protocol/geofed.proto"
    (tmp_path / proto).write_bytes((ROOT / proto).read_bytes())
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--pyi_out=.",
                    "--grpc_python_out=.", proto], cwd=tmp_path, check=True)
    for name in ("geofed_pb2.py", "geofed_pb2.pyi", "geofed_pb2_grpc.py"):
        fresh = (tmp_path / "geofed" / "protocol" / name).read_text()
        committed = (ROOT / "geofed" / "protocol" / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make generate`"


def test_every_package_is_declared_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    mapping = {v: k for k, v in config["package-dir"].items()}  # folder -> import name
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts[0] in ("tests", "bench", "geofed_testing", ".venv", "build") or rel.parts[0].startswith("."):
            continue
        for folder, name in mapping.items():  # a mapped folder installs under its import name
            if rel.as_posix() == folder or rel.as_posix().startswith(folder + "/"):
                rel = Path(name, *rel.parts[len(Path(folder).parts):])
        found.add(".".join(rel.parts))
    assert found == declared, f"missing: {sorted(found - declared)}, extra: {sorted(declared - found)}"


def test_no_package_shadows_the_standard_library():
    """A folder on the import path named like a stdlib module (e.g. `operator/`) must not be a package."""
    for child in ROOT.iterdir():
        if child.is_dir() and child.name in sys.stdlib_module_names:
            assert not (child / "__init__.py").exists(), f"{child.name}/ would shadow the standard library"
