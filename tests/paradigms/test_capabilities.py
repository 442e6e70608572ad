"""Capabilities live on the settings classes: a new paradigm or strategy declaring one is admitted by every
reader (config validation, the operator's CEL rule and builders, the launcher, the PS's strategy lookup and
guard) without any list of names being edited."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import ClassVar, Literal
from unittest import mock

import pytest
from pydantic import Field, ValidationError

from client_agent.paradigms import ParadigmError, client_paradigm
from geofed.config import FederationConfig
from geofed.paradigms import PARADIGMS, ParadigmSettings, PretrainSettings, paradigm_union, paradigms_with
from geofed_operator.cloud_builders import FederationObject
from geofed_operator.federation_spec import spec_rules
from ps_server.aggregation.guard import DeltaGuard
from ps_server.aggregation.strategies import strategy_class
from ps_server.aggregation.strategies.sparse_pretrain import SparsePretrain


class ElementwiseSettings(ParadigmSettings):
    """A paradigm no list knows, exchanging plain parameters element by element."""

    name: Literal["fake-elementwise"] = "fake-elementwise"
    elementwise: ClassVar[bool] = True


class OwnVectorSettings(ParadigmSettings):
    """A paradigm no list knows, exchanging its own vector, with a trainer and a fixed update ceiling."""

    name: Literal["fake-own"] = "fake-own"
    needs_trainer: ClassVar[bool] = True
    cumulative: ClassVar[bool] = False

    def update_ceiling(self, model) -> float:
        return 7.5


FAKES = (ElementwiseSettings, OwnVectorSettings)
SETTINGS = (*PARADIGMS.values(), *FAKES)
FakeParadigms = paradigm_union(SETTINGS)


class FakeFederation(FederationConfig):
    """`FederationConfig` with the fakes in its paradigm union: registered as the real ones are."""

    paradigm: FakeParadigms = Field(default_factory=PretrainSettings)


def test_a_new_elementwise_paradigm_is_admitted_on_a_sharded_ps_and_one_without_it_is_refused():
    fed = FakeFederation.model_validate({"ps_shards": 2, "paradigm": {"name": "fake-elementwise"}})
    assert fed.paradigm.elementwise and fed.ps_shards == 2
    with pytest.raises(ValidationError, match="element by element.*'fake-own' exchanges its own vector"):
        FakeFederation.model_validate({"ps_shards": 2, "paradigm": {"name": "fake-own"}})


def test_a_sharded_ps_refuses_a_codec_that_pushes_sparse_deltas():
    with pytest.raises(ValidationError, match="codec 'sparse' pushes sparse deltas"):
        FederationConfig.model_validate({"ps_shards": 2, "codec": {"name": "sparse"}})
    assert FederationConfig.model_validate({"ps_shards": 2, "codec": {"name": "auto"}}).codec.elementwise


def test_the_operator_rule_is_built_from_the_capability():
    (rule,) = [r["rule"] for r in spec_rules(SETTINGS) if "paradigm" in r["rule"]]
    assert "'fake-elementwise'" in rule and "'fake-own'" not in rule
    assert "'pretrain'" in rule and "'bitfit'" in rule and "'lora'" not in rule


def test_the_trainer_is_built_and_launched_for_any_paradigm_declaring_it():
    assert paradigms_with("needs_trainer", SETTINGS) == ("fsl-sage", "fake-own")
    spec = SimpleNamespace(paradigm=OwnVectorSettings())
    assert FederationObject.split_learning.fget(SimpleNamespace(spec=spec)) is True
    spec = SimpleNamespace(paradigm=ElementwiseSettings())
    assert FederationObject.split_learning.fget(SimpleNamespace(spec=spec)) is False
    with pytest.raises(ValueError, match="not a paradigm capability"):
        paradigms_with("elementwize")


def test_the_strategy_lookup_reads_the_codec_delta_form_and_what_the_settings_name():
    class SparseOnly(ElementwiseSettings):
        strategies = {"sparse": "ps_server.aggregation.strategies.sparse_pretrain:SparsePretrain"}

    assert strategy_class(SparseOnly, "sparse") is SparsePretrain
    with pytest.raises(ValueError, match="folds sparse deltas on this PS, not dense.*dense deltas are folded for "
                                         "paradigm\\(s\\) pretrain, bitfit"):
        strategy_class(SparseOnly, "dense")
    with pytest.raises(ValueError, match="no aggregation strategy for paradigm 'fake-own'"):
        strategy_class(OwnVectorSettings, "dense")
    assert strategy_class(PretrainSettings, FederationConfig(codec={"name": "sparse"}).codec.delta_form) is (
        SparsePretrain
    )


def test_the_guard_reads_the_update_ceiling_and_whether_deltas_add_up():
    own = FakeFederation.model_validate({"paradigm": {"name": "fake-own"}})
    guard = DeltaGuard(own)
    assert not guard.budget.enabled
    snap = SimpleNamespace(version=1)
    assert guard.limits(snap, 1000) == (7.5, 7.5)
    dense = DeltaGuard(FakeFederation.model_validate({"paradigm": {"name": "fake-elementwise"}}))
    assert dense.budget.enabled
    zo = FederationConfig.model_validate({"paradigm": {"name": "zo", "seeds": 4, "eps": 0.01}})
    assert DeltaGuard(zo).limits(snap, 10) == pytest.approx((2 * math.log(257) / 0.01,) * 2)


def test_a_settings_class_that_names_a_client_half_is_a_paradigm_declared_once():
    with mock.patch.dict(PARADIGMS):
        class Declared(ParadigmSettings):
            name: Literal["declared"] = "declared"
            client_half = "no_such_module:Half"

        assert PARADIGMS["declared"] is Declared and "fake-own" not in PARADIGMS
        with pytest.raises(ParadigmError, match="cannot load paradigm 'declared'.s client half 'no_such_module:Half'"):
            client_paradigm(Declared())
        with pytest.raises(ValueError, match="paradigm 'declared' is declared twice"):
            class Again(ParadigmSettings):
                name: Literal["declared"] = "declared"
                client_half = "no_such_module:Other"
    with pytest.raises(ParadigmError, match="no implementation of paradigm 'fake-own'"):
        client_paradigm(OwnVectorSettings())
