"""Outside `geofed/paradigms`, code asks a paradigm's declared facts (`ParadigmSettings`: elementwise,
needs_trainer, perturbs_adapters, its halves) instead of comparing its name, and no half declares the name
again: the product packages hold no comparison of a string to a paradigm name, so a new one fails until it
is made a question to the settings."""

from __future__ import annotations

import ast

from geofed.paradigms import PARADIGMS
from geofed_testing.name_comparisons import comparisons_by_file, name_comparisons, product_files

NAMES = set(PARADIGMS)



def _outside_the_settings(rel: str) -> bool:
    return rel.startswith("geofed/paradigms/")


def test_the_finder_sees_each_kind_of_comparison(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('a = p.name == "lora"\nb = "zo" != p.name\nc = p.name in ("hybrid-lora", "x")\n'
                   'd = p.name.startswith("ravan")\ne = p.name == "lorax"\nf = {"lora": 1}\n')
    assert name_comparisons(src, NAMES.__contains__) == [1, 2, 3, 4]


def test_no_paradigm_name_is_compared_outside_the_paradigm_settings():
    found, where = comparisons_by_file(NAMES.__contains__, _outside_the_settings)
    assert where == [], f"ask the paradigm's settings instead of comparing its name: {found}"


def _declares_a_name(stmt: ast.stmt) -> bool:
    """`name = "<a paradigm's name>"` (annotated or not) in a class body."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign):
        targets = [stmt.target]
    else:
        return False
    return (any(isinstance(t, ast.Name) and t.id == "name" for t in targets)
            and isinstance(stmt.value, ast.Constant) and stmt.value.value in NAMES)


def test_no_client_half_or_strategy_declares_its_paradigm_s_name():
    """A half's name is its settings' (`ClientParadigm.name`, `Strategy.name`): declared once, on them."""
    declared = [f"{rel}:{stmt.lineno}" for rel, path in product_files(_outside_the_settings)
                for cls in ast.walk(ast.parse(path.read_text())) if isinstance(cls, ast.ClassDef)
                for stmt in cls.body if _declares_a_name(stmt)]
    assert declared == []
