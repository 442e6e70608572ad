"""The CRD's CEL rules of a sharded PS (issue 18): psShards immutable, not with groups, pretrain/bitfit only."""

from __future__ import annotations

from typing import Any

import pytest

from .test_cel import check

PRETRAIN = {"name": "pretrain"}


@pytest.mark.parametrize(
    ("path", "value", "old", "accepted"),
    [
        ("psShards", 3, 3, True),
        ("psShards", 4, 3, False),  # immutable: the shard map is fixed when the model is installed
        ("psShards", 1, 3, False),
        # Spec-wide rules, on the spec as the API server sees it (defaults filled in: psShards 1, paradigm).
        ("", {"psShards": 3, "paradigm": PRETRAIN}, None, True),
        ("", {"psShards": 3, "paradigm": {"name": "bitfit"}}, None, True),
        ("", {"psShards": 3, "paradigm": PRETRAIN, "groups": []}, None, True),
        ("", {"psShards": 3, "paradigm": PRETRAIN, "groups": [{"name": "us-east"}]}, None, False),
        ("", {"psShards": 1, "paradigm": PRETRAIN, "groups": [{"name": "us-east"}]}, None, True),
        ("", {"psShards": 2, "paradigm": {"name": "lora"}}, None, False),
        ("", {"psShards": 1, "paradigm": {"name": "lora"}}, None, True),
    ],
)
def test_sharded_spec_rules(path: str, value: Any, old: Any, accepted: bool) -> None:
    assert check("federations", path, value, old) is accepted
