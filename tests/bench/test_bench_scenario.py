"""Scenario parsing and the methods' federation settings (bench/federation/scenario.py, methods.py)."""

from __future__ import annotations

import pytest

from bench.federation.methods import (
    MAIN_METHODS,
    METHODS,
    RATEDIST_METHODS,
    federation_for,
    get_method,
)
from bench.federation.scenario import ScenarioError, load_scenario, parse_scenario
from bench.federation.scenarios import BUILTIN
from geofed_apps.local import merge_settings


def _scenario(**over):
    data = {"name": "t", "budget_s": 60, "clients": [{"slowdown": 1, "link": "10ms/1ms/1MBps/2MBps"}]}
    return merge_settings(data, over)


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_builtin_scenarios_parse_and_every_method_has_valid_settings(name):
    """Every built-in scenario validates, and every method yields a valid FederationConfig in it."""
    scenario = load_scenario(name)
    for method in METHODS.values():
        fed = federation_for(scenario, method)
        assert fed.name == f"bench-{method.name}"


def test_hetero_wan_matches_the_issue():
    """4 clients, 1/1/2/4× compute, one link 10× thinner than the best, RTT 40 ms to 1 s, one outage."""
    s = load_scenario("hetero-wan")
    assert [c.slowdown for c in s.clients] == [1, 1, 2, 4]
    ups = [c.profile(0).up_bytes_per_s for c in s.clients]
    assert max(ups) / min(ups) == 10
    rtts = [2 * c.profile(0).latency_ms for c in s.clients]
    assert min(rtts) == 40 and max(rtts) == 1000
    assert sum(len(c.outages()) for c in s.clients) == 1
    assert s.checkpoints == (30, 60, 90, 120)


def test_profile_drops_outages_which_the_harness_times_from_theta0():
    s = parse_scenario(_scenario(clients=[{"link": "5ms/1ms/1MBps/2MBps,blackhole@10s+5s,reset@20s"}]))
    spec = s.clients[0]
    assert spec.profile(seed=7).outages == () and spec.profile(seed=7).seed == 7
    assert spec.outages() == [(10.0, "blackhole", 5.0), (20.0, "reset", 0.0)]


def test_default_checkpoints_are_the_budget_quarters():
    assert parse_scenario(_scenario(budget_s=100)).checkpoints == (25, 50, 75, 100)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"clients": [{"link": "fast"}]}, "clients.0.link"),
        ({"clients": [{"slowdown": 0.5}]}, "clients.0.slowdown"),
        ({"clients": [{"link": "1ms,blackhole@50s+20s"}]}, "ends after budget_s"),
        ({"report_at_s": [30, 90]}, "report_at_s [90.0]"),
        ({"colour": "red"}, "colour"),
        ({"clients": []}, "clients"),
        ({"name": "Has Spaces"}, "name"),
    ],
)
def test_bad_scenarios_name_the_problem(over, message):
    data = _scenario()
    data.update(over)
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(data)


def test_scenario_from_yaml_file_and_unknown_name(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: tiny\nbudget_s: 20\nclients:\n  - {slowdown: 2, link: 1ms/0ms/1MBps}\n")
    assert load_scenario(str(path)).clients[0].slowdown == 2
    with pytest.raises(ScenarioError, match="no built-in scenario 'nope'"):
        load_scenario("nope")
    path.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(str(path))


def test_baselines_are_what_the_paper_compares_against():
    s = load_scenario("hetero-wan")
    fedavg, diloco, fednova, ours = (
        federation_for(s, get_method(m)) for m in ("fedavg", "diloco", "fednova", "ours")
    )
    # sync FedAvg: barrier over every client, H binds (T is far away), fp32 deltas
    assert (fedavg.aggregation.mode, fedavg.aggregation.quorum, fedavg.codec.name) == ("sync", 1.0, "fp32")
    assert fedavg.training.sync_interval_s > 10 * s.budget_s
    # DiLoCo: its recommended outer Nesterov, lr 0.7, momentum 0.9
    assert (
        diloco.aggregation.outer_optimizer,
        diloco.aggregation.global_lr,
        diloco.aggregation.momentum,
    ) == ("nesterov", 0.7, 0.9)
    # FedNova: unequal local work in the same T as ours, normalised at the PS
    assert fednova.aggregation.fednova and fednova.training.sync_interval_s == ours.training.sync_interval_s
    assert fednova.training.local_steps > 1000
    # ours: geofed local's defaults
    assert (ours.aggregation.mode, ours.codec.name, ours.codec.entropy, ours.codec.error_feedback) == (
        "async",
        "int8",
        "huffman",
        True,
    )


def test_method_lists_and_unknown_method():
    assert set(MAIN_METHODS) | set(RATEDIST_METHODS) <= set(METHODS)
    with pytest.raises(ScenarioError, match="unknown method 'fedprox'"):
        get_method("fedprox")


def test_bad_federation_override_is_reported_with_its_path():
    s = parse_scenario(_scenario(federation={"training": {"lr": -1}}))
    with pytest.raises(ScenarioError, match="training.lr"):
        federation_for(s, get_method("ours"))

