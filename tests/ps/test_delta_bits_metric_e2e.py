"""The PS exports the bit width each client's last delta used (issue 14: tuned choices shown in metrics).

Real PS process; pushes over gRPC with the codec a client's 'auto' choice would have picked.
"""

from __future__ import annotations

import numpy as np
import pytest

from geofed_testing.procs import PSNode
from geofed_testing.wire import NUMEL, init_model, join, push
from ps_server.metrics import value_bits


@pytest.mark.parametrize(("name", "bits"), [("int8+huffman", 8), ("int16+huffman/b4096", 16), ("bf16", 16),
                                            ("fp32", 32), ("sparse", None)])
def test_value_bits_reads_the_width_from_the_codec_name(name, bits):
    assert value_bits(name) == bits


def test_the_metric_follows_each_clients_last_codec(tmp_path):
    # Prepare
    ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "async", "buffer_size": 1, "max_staleness": 8}},
                metrics=True).start()
    try:
        master = join(ps, "b.master", master=True)
        init_model(master)
        master.wait_for_version(0, timeout=20)
        delta = (np.random.default_rng(0).standard_normal(NUMEL) * 1e-3).astype(np.float32)

        # Execute and assert: the gauge holds the width of the client's latest push
        assert push(master, 1, delta, codec="int16").status == "APPLIED"
        assert ps.metric("geofed_client_delta_bits") == 16
        master.wait_for_version(1, timeout=20)
        assert push(master, 2, delta, codec="int8").status == "APPLIED"
        assert ps.metric("geofed_client_delta_bits") == 8
        master.close()
    finally:
        ps.kill()
