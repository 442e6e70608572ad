"""The paradigm settings union: names, per-paradigm keys, and that every paradigm has both halves."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from client_agent.paradigms import ClientParadigm, client_paradigm
from geofed.config import FederationConfig
from geofed.paradigms import PARADIGMS
from ps_server.aggregation.strategies import Strategy, build_strategy, strategy_class


@pytest.mark.parametrize("name", PARADIGMS)
def test_every_paradigm_s_settings_name_a_client_half_and_a_server_half_for_each_delta_form(name):
    settings = PARADIGMS[name]

    half = client_paradigm(settings())
    strategies = {form: strategy_class(settings, form) for form in settings.strategies}

    assert isinstance(half, ClientParadigm) and half.name == name
    assert "dense" in strategies and all(issubclass(s, Strategy) for s in strategies.values())


def test_the_declared_paradigms_are_the_settings_modules_of_the_package():
    assert list(PARADIGMS)[:2] == ["pretrain", "bitfit"]
    assert set(PARADIGMS) == {"pretrain", "bitfit", "lora", "dpo", "hybrid-lora", "ravan", "zo", "fsl-sage"}


@pytest.mark.parametrize("name", PARADIGMS)
def test_a_paradigm_can_be_chosen_by_name_alone_and_round_trips_through_json(name):
    fed = FederationConfig.model_validate({"paradigm": {"name": name}})

    again = FederationConfig.model_validate_json(fed.model_dump_json())

    assert fed.paradigm.name == again.paradigm.name == name
    assert build_strategy(again).name == name


def test_the_default_paradigm_is_pretraining_and_a_bare_name_is_accepted():
    assert FederationConfig().paradigm.name == "pretrain"
    assert FederationConfig(paradigm="bitfit").paradigm.name == "bitfit"


def test_an_unknown_paradigm_is_refused_naming_the_known_ones():
    with pytest.raises(ValidationError, match="'nope'.*'pretrain', 'bitfit'"):
        FederationConfig.model_validate({"paradigm": {"name": "nope"}})


def test_a_setting_of_another_paradigm_is_refused_naming_it():
    with pytest.raises(ValidationError, match=r"paradigm\.pretrain\.layer_norms"):
        FederationConfig.model_validate({"paradigm": {"name": "pretrain", "layer_norms": False}})
    fed = FederationConfig.model_validate({"paradigm": {"name": "bitfit", "layer_norms": False}})
    assert fed.paradigm.layer_norms is False
