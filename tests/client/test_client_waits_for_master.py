"""A client joined to a federation whose master never installs the initial model says why it waits, every
`model_wait_notice_s`, naming the fix: the PS's named master client, or a token minted with --master."""

from __future__ import annotations

import re

import pytest

from geofed_apps.launch import start_client, stop
from geofed_testing.procs import PSNode
from geofed_testing.wire import mint

TINY = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}}
NOTICE_S = 3.0  # the client's model_wait_notice_s: it gives up after two notices


@pytest.mark.parametrize(
    ("ps_flags", "fix"),
    [
        ([], "mint a token with --master for the client that builds the initial model"),
        (["--master-client-id", "uw.gpu0"], "the federation's master client 'uw.gpu0' (server.master_client_id) has "
         "not installed the initial model: start it"),
    ],
    ids=["no-master-named", "master-named"],
)
def test_a_client_waiting_for_the_initial_model_names_the_cause_and_the_fix(tmp_path, ps_flags, fix):
    ps = PSNode(tmp_path / "ps", TINY, extra=ps_flags).start()
    client = None
    try:
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "a.txt").write_text("some private text for the client to train on. " * 400)
        client = start_client(mint(ps, "uw.gpu1"), tmp_path / "token", tmp_path / "client.log", ps=ps.address,
                              client_id="uw.gpu1", data=tmp_path / "data", work_dir=tmp_path / "work",
                              model_wait_timeout_s=2 * NOTICE_S + 1, model_wait_notice_s=NOTICE_S)
        assert client.wait(timeout=240) == 3
        log = (tmp_path / "client.log").read_text()
        waits = re.findall(r"event=waiting_for_model newer_than=0 waited_s=(\d+) .*reason=(.*)", log)
        assert waits and all(fix in reason for _, reason in waits), log[-3000:]
        assert float(waits[0][0]) >= NOTICE_S - 1  # not a line per poll: one per notice period
        assert len(waits) >= 2, log[-3000:]  # the wait lasts two notice periods and a second
        last = log.strip().splitlines()[-1]
        assert last.startswith("geofed client: NoGlobalModel: ") and fix in last, log[-3000:]
    finally:
        stop(client)
        ps.kill()
