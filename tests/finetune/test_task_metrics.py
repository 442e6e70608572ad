"""The fine-tuning task, its metrics and trivial rules, in process: pairs from source, the split, exact match and F1."""

from __future__ import annotations

import re

import numpy as np
import pytest

from client_agent.data.corpus import holdout_modules, stdlib_files, stdlib_root
from geofed_apps.finetune.base_model import pretraining_files
from geofed_apps.finetune.metrics import exact_match, score, token_f1
from geofed_apps.finetune.rules import copy_from_prompt, most_frequent, rule_scores
from geofed_apps.finetune.task import (
    EVAL_FRACTION,
    MAX_CONTEXT_BYTES,
    OWN_EVAL_FRACTION,
    SPLIT_SEED,
    QAPair,
    pairs_from_files,
    pairs_from_source,
    read_pairs,
    renamed,
    split_modules,
    stdlib_qa_split,
    with_renamings,
    with_windows,
    write_pairs,
)

SOURCE = '''
def top(path, *, mode="r"):
    """Open *path*.

    More text that is not the first paragraph.
    """

class Box:
    def put(self, item, *, block=True, timeout=None):
        """Put an item into the box,
        waiting if it is full."""

    def size(self):
        """Number of items."""

    def nodoc(self, x):
        return x

    class Inner:
        async def fetch(self, url: str, retries: int = 3, *rest, **options) -> bytes:
            """Fetch *url*, trying ``retries`` times; rest and options go on."""
'''


def test_pairs_are_a_functions_name_and_docstring_with_the_parameters_it_mentions_as_the_answer():
    pairs = pairs_from_source(SOURCE)

    assert {p.doc: p.answer for p in pairs} == {
        "# top: Open *path*. More text that is not the first paragraph.": "path",  # mode is not mentioned
        "# Box.put: Put an item into the box, waiting if it is full.": "item",
        "# Inner.fetch: Fetch *url*, trying ``retries`` times; rest and options go on.": "url retries rest options",
    }  # size(self) has no parameter to ask for, nodoc no docstring
    assert pairs[0].text == pairs[0].prompt + pairs[0].answer + "\n"
    assert pairs[0].prompt == "# top: Open *path*. More text that is not the first paragraph.\n# parameters: "
    assert all("def " not in p.prompt for p in pairs)  # the signature is never shown


def test_a_long_docstring_is_cut_so_prompt_and_answer_fit_the_base_models_context():
    doc = "alpha " + "word " * 60 + "beta"
    (pair,) = pairs_from_source(f'def f(alpha, beta):\n    """{doc}"""\n')

    assert len(pair.doc) <= MAX_CONTEXT_BYTES and pair.doc.startswith("# f: alpha word word")
    assert pair.answer == "alpha"  # beta is mentioned only after the cut
    assert len(pair.text.encode()) <= 128


@pytest.mark.parametrize(
    ("prediction", "truth", "em", "f1"),
    [
        ("item block timeout", "item block timeout", 1.0, 1.0),
        ("item  block timeout ", "item block timeout", 1.0, 1.0),  # whitespace is normalised
        ("item block", "item block timeout", 0.0, 0.8),  # p = 1, r = 2/3
        ("block item timeout", "item block timeout", 0.0, 1.0),  # order matters for EM only
        ("x y", "item", 0.0, 0.0),
        ("", "item", 0.0, 0.0),
        ("Item", "item", 0.0, 0.0),  # names are case-sensitive
    ],
)
def test_exact_match_and_token_f1_against_hand_computed_values(prediction, truth, em, f1):
    assert exact_match(prediction, truth) == em
    assert token_f1(prediction, truth) == pytest.approx(f1)


def test_score_is_the_mean_in_percent_and_refuses_misaligned_lists():
    assert score(["a b", "c"], ["a b", "d"]) == (50.0, 50.0)
    with pytest.raises(ValueError, match="as many predictions"):
        score(["a"], ["a", "b"])


def test_the_split_holds_out_the_base_models_unseen_modules_and_no_held_out_answer_is_a_training_answer():
    split = stdlib_qa_split(3)
    root = stdlib_root()
    train_files, held_files = holdout_modules(stdlib_files(root=root), EVAL_FRACTION, SPLIT_SEED, root)
    trained = {p.answer for c in split.clients for p in c}
    seen = {p.answer for p in pairs_from_files(train_files)}  # trained on, or held back as a client's own

    assert set(pretraining_files()) == set(train_files) and not set(held_files) & set(train_files)
    assert set(split.eval) == {p for p in pairs_from_files(held_files) if p.answer not in seen}
    assert not {p.answer for p in split.eval} & trained  # nothing to recall from training
    assert len(split.eval) >= 150 and all(len(c) >= 400 for c in split.clients)
    assert len(pairs_from_files(held_files)) > len(split.eval)  # the filter did drop overlapping answers


def test_each_client_holds_back_a_share_of_its_own_modules_pairs_whose_answers_no_client_trains_on():
    seed = 1
    split = stdlib_qa_split(2, seed=seed)
    root = stdlib_root()
    train_files, _ = holdout_modules(stdlib_files(root=root), EVAL_FRACTION, SPLIT_SEED, root)
    dealt = [pairs_from_files(files) for files in split_modules(train_files, 2, seed, root)]
    trained = {p.answer for c in split.clients for p in c}

    for own, kept, mine in zip(split.own_eval, split.clients, dealt, strict=True):
        assert set(kept) < set(mine) and set(own) < set(mine)  # both from the client's own modules
        assert not set(own) & set(kept)
        assert len(mine) - len(kept) == round(OWN_EVAL_FRACTION * len(mine))  # held back before the filter
        assert len(own) >= 15 and not {p.answer for p in own} & trained
    assert not set(split.own_eval[0]) & set(split.own_eval[1])
    assert stdlib_qa_split(2, seed=seed).own_eval == split.own_eval  # the seed fixes it
    assert stdlib_qa_split(2, seed=seed + 1).own_eval[0] != split.own_eval[0]


def test_the_seed_deals_modules_to_clients_differently_and_keeps_the_held_out_pairs():
    one, other = stdlib_qa_split(2, seed=0), stdlib_qa_split(2, seed=1)

    assert one.eval == other.eval
    assert set(one.clients[0]) != set(other.clients[0]) and set(one.clients[0]) != set(other.clients[1])
    every = set(pairs_from_files(pretraining_files()))
    for split in (one, other):  # the same pool, dealt by module; each client's own held-out share kept back
        assert set(split.clients[0]) | set(split.clients[1]) <= every
        kept = len(split.clients[0]) + len(split.clients[1])
        # a pair met in two clients' modules counts twice
        assert kept == pytest.approx((1 - OWN_EVAL_FRACTION) * len(every), rel=0.01)


def test_rules_copy_known_names_from_the_prompt_and_the_most_frequent_answer():
    train = [
        QAPair("# a: x", "name"),
        QAPair("# b: y", "name"),
        QAPair("# c: z", "name value"),
        QAPair("# d: w", "value"),
        QAPair("# e: v", "value"),
        QAPair("# f: u", "key path"),
    ]
    held = [QAPair("# get_value: Return the value for name.", "value name"), QAPair("# g: Nothing known.", "key")]
    rules = {
        "most": most_frequent(train),
        "copy": copy_from_prompt(train, k=2),
        "first": copy_from_prompt(train, k=1, name_first=True),
    }

    assert [rules["most"](p) for p in held] == ["name", "name"]  # 3 uses of "name", 3 of "value": first seen
    assert [rules["copy"](p) for p in held] == ["value name", ""]  # "key" is used once: not a known name
    assert [rules["first"](p) for p in held] == ["value", ""]
    scores = rule_scores(train, held)
    assert scores["copy-from-prompt k=2"] == (50.0, 50.0)
    assert scores["most-frequent"] == (0.0, pytest.approx(100 * (2 / 3) / 2))  # "name" vs "value name": F1 2/3


def test_pairs_round_trip_through_the_jsonl_the_clients_train_on(tmp_path):
    pairs = pairs_from_source(SOURCE)
    path = write_pairs(tmp_path / "c.jsonl", pairs)

    assert read_pairs(path) == pairs


def test_windows_add_a_functions_later_sentences_that_name_a_parameter_unless_the_answer_is_held_out(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    first = pairs_from_source(SOURCE)
    fetch = next(p for p in first if p.doc.startswith("# Inner.fetch"))
    later = QAPair("# Inner.fetch: rest and options go on.", "rest options")

    got = with_windows(first, [path], refused=set())
    assert got[: got.index(fetch) + 2][-2:] == [fetch, later]  # right after its function's first window
    assert set(got) == set(first) | {later}  # "More text ..." and the one-sentence docstrings add nothing
    assert with_windows(first, [path], refused={"rest options"}) == first


def test_the_split_with_windows_trains_on_more_pairs_and_holds_out_the_same_ones():
    plain, wide = stdlib_qa_split(2, seed=0), stdlib_qa_split(2, seed=0, windows=True)
    held = {p.answer for p in wide.eval} | {p.answer for own in wide.own_eval for p in own}

    assert wide.eval == plain.eval and wide.own_eval == plain.own_eval
    for narrow, more in zip(plain.clients, wide.clients, strict=True):
        assert set(narrow) < set(more) and len(more) > 1.5 * len(narrow)
        assert not {p.answer for p in set(more) - set(narrow)} & held


def test_a_renamed_pair_renames_each_parameter_in_the_docstring_and_the_answer_alike():
    pair = QAPair("# Inner.fetch: Fetch *url*, trying ``retries`` times; rest and options go on.",
                  "url retries rest options")
    names = ["path", "count", "rest", "trying", "mode", "key"]  # "rest" and "trying" are words of the docstring

    got = renamed(pair, names, np.random.default_rng(0))

    new = got.answer.split()
    assert sorted(new) == ["count", "key", "mode", "path"]  # four distinct names the docstring did not use
    old_to_new = dict(zip(pair.answer.split(), new, strict=True))
    expected = "# Inner.fetch: Fetch *{url}*, trying ``{retries}`` times; {rest} and {options} go on.".format(
        **old_to_new)
    assert got.doc == expected  # "Inner.fetch" keeps its name: only the docstring is renamed
    assert renamed(pair, ["path", "count", "rest"], np.random.default_rng(0)) is None  # too few free names


def test_a_renamed_pair_is_cut_to_the_context_again_and_keeps_only_the_names_still_shown():
    doc = "# f: a " + "x " * 36 + "``b``"  # 84 bytes: b ends the context
    assert len(doc) == MAX_CONTEXT_BYTES
    pair = QAPair(doc, "a b")

    got = renamed(pair, ["longer_name", "other_long_name"], np.random.default_rng(1))

    assert len(got.doc) <= MAX_CONTEXT_BYTES
    assert got.answer in ("longer_name", "other_long_name")  # b's new name was pushed out of the context
    assert got.doc == f"# f: {got.answer} {'x ' * 36}"[:MAX_CONTEXT_BYTES].rstrip()


def test_renamings_add_copies_under_words_of_the_docstrings_and_never_a_refused_name():
    pairs = pairs_from_source(SOURCE)
    refused = {"url", "times"}

    got = with_renamings(pairs, 3, refused, np.random.default_rng(0))

    assert got[: len(pairs)] == pairs and len(pairs) < len(got) <= 4 * len(pairs)
    docstrings = " ".join(p.doc.partition(": ")[2] for p in pairs)
    allowed = {w for w in re.findall(r"\w+", docstrings) if len(w) > 1} - refused  # "Open", "box", "retries", ...
    new_names = {n for p in got[len(pairs):] for n in p.answer.split()}
    assert new_names <= allowed and len(new_names) > 4
    assert new_names - {n for p in pairs for n in p.answer.split()}  # not only parameter names


def test_the_split_with_renamings_holds_out_the_same_pairs_and_trains_on_no_held_out_name():
    plain, renaming = stdlib_qa_split(2, seed=0), stdlib_qa_split(2, seed=0, renamings=2)
    held_names = {n for p in plain.eval for n in p.answer.split()}
    held_names |= {n for own in plain.own_eval for p in own for n in p.answer.split()}

    assert renaming.eval == plain.eval and renaming.own_eval == plain.own_eval
    for narrow, more in zip(plain.clients, renaming.clients, strict=True):
        assert more[: len(narrow)] == narrow and len(more) > 2.5 * len(narrow)
        assert not {n for p in more[len(narrow):] for n in p.answer.split()} & held_names
