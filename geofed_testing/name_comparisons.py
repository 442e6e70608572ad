"""Where product code compares a string to a plug-in's name (a codec's, a paradigm's) instead of asking the
plug-in a fact: the finder the name-comparison tests run over the product packages."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("geofed", "ps_server", "client_agent", "geofed_apps", "operator/geofed_operator")


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def name_comparisons(path: Path, spells: Callable[[str], bool]) -> list[int]:
    """Lines of `path` comparing something to a string that `spells` a name (==, !=, in, startswith)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            if any(spells(s) for op in (node.left, *node.comparators) for s in _strings(op)):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith")
              and any(spells(s) for arg in node.args for s in _strings(arg))):
            lines.append(node.lineno)
    return lines


def product_files(skip: Callable[[str], bool]) -> Iterator[tuple[str, Path]]:
    """(path relative to the repository, path) of every product module but the generated ones and `skip`'s."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not (rel.endswith("_pb2.py") or skip(rel)):
                yield rel, path


def comparisons_by_file(spells: Callable[[str], bool], skip: Callable[[str], bool]) -> tuple[Counter, list[str]]:
    """(comparisons per file, each as 'path:line') over the product packages, less `skip`'s files."""
    found: Counter = Counter()
    where = []
    for rel, path in product_files(skip):
        for line in name_comparisons(path, spells):
            found[rel] += 1
            where.append(f"{rel}:{line}")
    return found, where
