"""The site-specific preference variant: site i prefers the docstring task's answer in its order (signature or
alphabetical), the other order rejected, on its training pairs and its held-out ones; and the rule baselines."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from client_agent.data.files import load_data
from client_agent.data.records import Preference
from client_agent.data.tokenizer import ByteTokenizer
from client_agent.paradigms.dpo import read_preferences
from geofed_apps.finetune.preset import FinetuneTask
from geofed_apps.finetune.site_preference import SitePreferenceTask, site_order, site_preferences
from geofed_apps.finetune.task import QAPair

RULES = Path(__file__).parents[2] / "bench" / "results" / "site-preferences" / "rules.py"


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("signature", [("b a c\n", "a b c\n"), ("zeta Alpha\n", "Alpha zeta\n")]),
        ("alphabetical", [("a b c\n", "b a c\n"), ("Alpha zeta\n", "zeta Alpha\n")]),
    ],
)
def test_a_site_chooses_its_order_and_rejects_the_other_and_pairs_whose_orders_agree_are_dropped(order, expected):
    # Prepare: one name, names already sorted, and two whose orders differ (code-point order: "A" < "z")
    pairs = [QAPair("# f: uses x", "x"), QAPair("# g: a then b", "a b"), QAPair("# h: b a c", "b a c"),
             QAPair("# k: zeta Alpha", "zeta Alpha")]

    # Execute
    prefs = site_preferences(pairs, order)

    # Assert
    assert [(p.chosen, p.rejected) for p in prefs] == expected
    assert [p.prompt for p in prefs] == [pairs[2].prompt, pairs[3].prompt]


def test_an_unknown_order_is_refused():
    with pytest.raises(ValueError, match="no answer order 'reverse'; known: signature, alphabetical"):
        site_preferences([QAPair("# f: b a", "b a")], "reverse")


def _answers(path: Path) -> dict[str, str]:
    """prompt -> answer (without its newline) of the LoRA preset's JSONL pairs."""
    return {r["prompt"]: r["answer"] for r in map(json.loads, path.read_text().splitlines())}


def test_the_written_sites_prefer_their_own_order_of_the_lora_preset_s_answers(tmp_path):
    # Execute
    task = SitePreferenceTask.write(tmp_path / "sites", 2, seed=1)
    lora = FinetuneTask.write(tmp_path / "lora", 2, seed=1)

    # Assert: site 0 prefers the signature order (the LoRA preset's answer), site 1 the alphabetical one
    assert task.orders == ("signature", "alphabetical") and site_order(2) == "signature"
    for i in range(2):
        for written, reference in ((task.client_files[i].with_suffix(".jsonl"), lora.client_files[i].with_suffix(
                ".jsonl")), (task.own_eval_files[i], lora.own_eval_files[i]), (task.eval_files[i], lora.eval_file)):
            answers = _answers(reference)
            multi = {p: a for p, a in answers.items() if a.split() != sorted(a.split())}
            prefs = read_preferences(written)
            assert {p.prompt for p in prefs} == set(multi)
            for p in prefs:
                signature, alphabetical = f"{multi[p.prompt]}\n", " ".join(sorted(multi[p.prompt].split())) + "\n"
                assert (p.chosen, p.rejected) == ((signature, alphabetical) if i == 0 else (alphabetical, signature))
        data = task.client_files[i].with_suffix(".jsonl")
        examples, _ = load_data([data], ByteTokenizer())  # the client's own reader takes them
        assert examples.preferences and len(examples) == len(read_preferences(data)) > 0


def _rules():
    spec = importlib.util.spec_from_file_location("site_preference_rules", RULES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("pref", "shorter", "docstring_order", "alphabetical"),
    [
        # the docstring names `tb` before `limit`; alphabetical order is `limit tb`
        (Preference("# print_tb: entries from 'tb'. If 'limit' is\n# parameters: ", "tb limit\n", "limit tb\n", ""),
         None, "tb limit\n", "limit tb\n"),
        # `spec` is not in the docstring: it sorts last, so the docstring order is `module spec`
        (Preference("# run: the module named\n# parameters: ", "spec module\n", "module spec\n", ""),
         None, "module spec\n", "module spec\n"),
    ],
)
def test_each_rule_picks_by_hand(pref, shorter, docstring_order, alphabetical):
    rules = _rules()

    assert rules.shorter(pref) == shorter
    assert rules.docstring_order(pref) == docstring_order
    assert rules.alphabetical(pref) == alphabetical
    assert rules.accuracy(rules.shorter, [pref]) == 50.0  # a tie counts one half
    assert rules.accuracy(rules.alphabetical, [pref]) == (100.0 if alphabetical == pref.chosen else 0.0)
