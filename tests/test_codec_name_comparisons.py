"""Outside `geofed/codec`, code asks a codec's declared facts (`geofed.codec.base.Codec`) instead of comparing
its name: every comparison of a string to a codec name in the product packages is listed here with why it is
not one, so a new one fails until it is made a question to the codec (or justified in this list)."""

from __future__ import annotations

import ast
import typing
from collections import Counter
from pathlib import Path

from geofed.config import CodecName

SHIPPED = set(typing.get_args(CodecName)) - {"auto"}  # 'auto' picks a codec; it is no codec's name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("geofed", "ps_server", "client_agent", "geofed_apps", "operator/geofed_operator")

ALLOWED = Counter({  # path -> comparisons whose string only happens to spell a codec name
    "client_agent/precision.py": 2,  # training precisions ("bf16", "fp32"), not codecs
    "client_agent/fsdp.py": 1,  # the training precision "fp32"
    "geofed_apps/local.py": 1,  # the delta form "sparse" (`CodecConfig.delta_form`), a fact already asked
})


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def _spells_a_codec(text: str, names: set[str]) -> bool:
    return text in names or any(text.startswith((f"{n}+", f"{n}/")) for n in names)


def name_comparisons(path: Path, names: set[str]) -> list[int]:
    """Lines of `path` comparing something to a codec name (==, !=, in, startswith)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_spells_a_codec(s, names) for op in operands for s in _strings(op)):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith")
              and any(_spells_a_codec(s, names) for arg in node.args for s in _strings(arg))):
            lines.append(node.lineno)
    return lines


def test_the_finder_sees_each_kind_of_comparison(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('a = n == "fp32"\nb = "int8" != n\nc = n in ("bf16", "x")\nd = n.startswith("fp32")\n'
                   'e = n == "int8+huffman"\nf = n == "auto"\ng = {"fp32": 1}\n')
    assert name_comparisons(src, SHIPPED) == [1, 2, 3, 4, 5]


def test_no_codec_name_is_compared_outside_the_codec_package():
    names = SHIPPED
    found = Counter()
    where = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("geofed/codec/") or rel.endswith("_pb2.py"):
                continue
            for line in name_comparisons(path, names):
                found[rel] += 1
                where.append(f"{rel}:{line}")
    assert found == ALLOWED, f"compare by the codec's facts instead of its name: {where}"
    assert sum(ALLOWED.values()) <= 4
