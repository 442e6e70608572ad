"""A PS rule that geofed does not ship, declared in a test-support file only (tests/plugins/refuse_clients.py),
runs in a real `geofed local` federation: `GEOFED_PLUGINS` names its module, and the PS refuses what it
refuses while the other clients' deltas are applied."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from geofed_testing.local_run import run_local
from ps_server.checkpoint import CheckpointStore

ROOT = Path(__file__).resolve().parents[2]
REFUSED = "local.client-1"


@pytest.mark.long
def test_a_rule_from_a_test_module_refuses_one_clients_deltas_and_the_others_train(tmp_path, monkeypatch):
    # Prepare
    monkeypatch.setenv("GEOFED_PLUGINS", "tests.plugins.refuse_clients")
    monkeypatch.setenv("GEOFED_REFUSED_CLIENTS", "*.client-1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    # Execute
    out = run_local(tmp_path, "--clients", "3", "--duration", "30")

    # Assert: every refusal the rule made was of the matching client, which landed nothing; the others did
    ps_log = (out.run_dir / "logs" / "ps.log").read_text()
    refused = re.findall(r"event=push_rejected client='([^']+)' reason=refused_client", ps_log)
    assert refused and set(refused) == {REFUSED}, ps_log[-3000:]
    ledger = CheckpointStore(out.run_dir / "ps").load_latest().aggregator["ledger"]
    assert REFUSED not in ledger, ledger
    assert all(ledger.get(c, {}).get("pushes", 0) > 0 for c in ("local.client-0", "local.client-2")), ledger
    assert out.first_loss is not None and out.last_loss < out.first_loss, out.stdout[-2000:]
