"""The paradigm settings union: names, per-paradigm keys, and that every paradigm has both halves."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from client_agent.paradigms import CLIENT_PARADIGMS
from geofed.config import FederationConfig
from geofed.paradigms import PARADIGM_NAMES
from ps_server.aggregation.strategies import STRATEGIES, build_strategy


def test_every_paradigm_has_settings_a_client_half_and_a_server_half():
    assert set(PARADIGM_NAMES) == set(CLIENT_PARADIGMS) == set(STRATEGIES)
    assert "pretrain" in PARADIGM_NAMES and "bitfit" in PARADIGM_NAMES


@pytest.mark.parametrize("name", PARADIGM_NAMES)
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
