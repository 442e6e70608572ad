"""The fine-tuning task and its metrics, in process: pairs from source, the split, exact match and F1."""

from __future__ import annotations

import pytest

from client_agent.corpus import holdout_modules, stdlib_files, stdlib_root
from geofed_apps.finetune.metrics import exact_match, score, token_f1
from geofed_apps.finetune.task import (
    pairs_from_files,
    pairs_from_source,
    read_pairs,
    stdlib_qa_split,
    write_pairs,
)

SOURCE = '''
class Box:
    def put(self, item, *, block=True, timeout=None):
        pass

    def size(self):
        return 0

def merge(a, b=None, /, *rest, **options):
    return a

async def fetch(url: str, retries: int = 3) -> bytes:
    return b""
'''


def test_pairs_are_each_function_signature_with_its_parameter_names_in_order():
    pairs = pairs_from_source(SOURCE)

    assert {p.doc: p.answer for p in pairs} == {
        "def put(self, item, *, block=True, timeout=None):": "item block timeout",
        "def merge(a, b=None, /, *rest, **options):": "a b rest options",
        "async def fetch(url: str, retries: int=3):": "url retries",  # the def line up to its parameters
    }  # size(self) has no parameter to ask for
    assert pairs[0].text == pairs[0].prompt + pairs[0].answer + "\n"
    assert pairs[0].prompt.endswith("\n# parameters: ")


@pytest.mark.parametrize(("prediction", "truth", "em", "f1"), [
    ("item block timeout", "item block timeout", 1.0, 1.0),
    ("item  block timeout ", "item block timeout", 1.0, 1.0),  # whitespace is normalised
    ("item block", "item block timeout", 0.0, 0.8),  # p = 1, r = 2/3
    ("block item timeout", "item block timeout", 0.0, 1.0),  # order matters for EM only
    ("x y", "item", 0.0, 0.0),
    ("", "item", 0.0, 0.0),
    ("Item", "item", 0.0, 0.0),  # names are case-sensitive
])
def test_exact_match_and_token_f1_against_hand_computed_values(prediction, truth, em, f1):
    assert exact_match(prediction, truth) == em
    assert token_f1(prediction, truth) == pytest.approx(f1)


def test_score_is_the_mean_in_percent_and_refuses_misaligned_lists():
    assert score(["a b", "c"], ["a b", "d"]) == (50.0, 50.0)
    with pytest.raises(ValueError, match="as many predictions"):
        score(["a"], ["a", "b"])


def test_the_split_holds_out_the_pretraining_modules_and_trains_on_no_held_out_pair():
    split = stdlib_qa_split(3)
    root = stdlib_root()
    _, held_files = holdout_modules(stdlib_files(root=root), 0.02, 0, root)  # the base model's held-out modules

    assert set(split.eval) == set(pairs_from_files(held_files))
    assert len(split.eval) >= 50 and all(len(c) >= 500 for c in split.clients)
    for client in split.clients:  # (two modules may share a signature: clients may, eval may not)
        assert not set(split.eval) & set(client)


def test_pairs_round_trip_through_the_jsonl_the_clients_train_on(tmp_path):
    pairs = pairs_from_source(SOURCE)
    path = write_pairs(tmp_path / "c.jsonl", pairs)

    assert read_pairs(path) == pairs
