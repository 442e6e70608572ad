"""The PS names the moment the initial model was installed in every Join (where the clients' run-time
learning-rate schedule starts) and resumes it from its checkpoint."""

from __future__ import annotations

import time

import numpy as np

from geofed.config import FederationConfig, ServerConfig
from ps_server.core import ParameterServerCore
from ps_server.global_model import TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush

NUMEL = 32
MANIFEST = (TensorEntry("w", (NUMEL,), "float32"),)
ADMIN = "x" * 32


class _InitPush(ReceivedPush):
    """The master's Θ0 from memory (the aggregator only iterates its values)."""

    def __init__(self, client: str, upload: str) -> None:
        self.client_id, self._values, self.numel, self.codec_name = client, np.ones(NUMEL, np.float32), NUMEL, "fp32"
        self.norm = float(np.linalg.norm(self._values))
        self.header = PushHeader(base_version=0, upload_id=upload, codec_header=b"", payload_bytes=0, init=True,
                                 manifest=MANIFEST)

    def iter_values(self, max_numel):
        yield 0, self._values

    def close(self):
        pass


def _core(tmp_path) -> ParameterServerCore:
    server = ServerConfig(checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=1)
    return ParameterServerCore(FederationConfig(), server, admin_credential=ADMIN)


def _join(core: ParameterServerCore, client_id: str, master: bool = False):
    token, _ = core.mint_token(core.registry.authenticate_admin(ADMIN), client_id, "s", 600.0, master=master)
    return core.join(token, client_id)


def test_a_join_before_the_initial_model_names_no_start_and_one_after_it_names_the_install_time(tmp_path):
    core = _core(tmp_path)
    before = _join(core, "s.c0", master=True)

    t0 = time.time()
    core.aggregator.initialise(_InitPush("s.c0", "init-1"))
    t1 = time.time()
    after = _join(core, "s.c1")

    assert before.run_started_at == 0.0
    assert t0 <= after.run_started_at <= t1


def test_a_restarted_ps_resumes_the_start_from_its_checkpoint(tmp_path):
    core = _core(tmp_path)
    core.aggregator.initialise(_InitPush("s.c0", "init-1"))
    started = core.aggregator.run_started_at
    assert core.checkpoint()
    time.sleep(0.05)

    restarted = _core(tmp_path)
    assert restarted.resume()
    rejoined = _join(restarted, "s.c1")

    assert started > 0
    assert rejoined.run_started_at == started
