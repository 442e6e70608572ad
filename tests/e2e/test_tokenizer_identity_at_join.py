"""The trial's third site, over a real `geofed ps` and real `geofed client`s: the sites tokenise with a locally
built BPE tokenizer, the master's defines the federation's, and a site started without `--tokenizer` (the
byte tokenizer, whose 257 ids fit the model's vocabulary) is refused before it joins, naming both tokenizers;
its token still joins once it is given the federation's tokenizer, and the global model never saw it. A client
that lies in its preview is refused by the PS's Join, its token kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.tokenizer_identity import BYTE_SHA256, tokenizer_sha256
from geofed_apps.launch import write_token
from geofed_testing.procs import PSNode
from geofed_testing.user_model import make_bpe_tokenizer
from geofed_testing.wire import mint, rpc_code

GEOFED = str(Path(sys.executable).with_name("geofed"))
FED = {  # model.tokenizer unstated: the master client's tokenizer is the federation's
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 512},
    "training": {"batch_size": 4, "local_steps": 2, "sync_interval_s": 60, "eval_every": 100, "precision": "fp32"},
    "codec": {"name": "int8"},
}
TEXT = "def add(a, b):\n    return a + b\n\nclass Point:\n    x: int = 0\n    y: int = 0\n" * 300


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok-site")
    (root / "data").mkdir()
    (root / "data" / "a.txt").write_text(TEXT)
    make_bpe_tokenizer(root / "bpe", vocab_size=400, texts=[TEXT])
    ps = PSNode(root / "ps", FED).start()
    try:
        yield ps, root
    finally:
        ps.kill()


def _client(ps: PSNode, root: Path, client_id: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GEOFED, "client", "--ps", ps.address, "--client-id", client_id, "--token-file", str(root / client_id),
         "--work-dir", str(root / "work" / client_id), "--insecure", "--data", str(root / "data"),
         "--device", "cpu", "--max-rounds", "1", *extra],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_a_site_without_the_federations_tokenizer_is_refused_before_join(site):
    # Arrange: the master (site a) joins with the BPE tokenizer, bootstraps and pushes
    ps, root = site
    bpe = tokenizer_sha256(str(root / "bpe"))
    with ps.admin() as admin:
        write_token(root / "a.master", admin.create_token("a.master", master=True)[0])
        write_token(root / "c.third", admin.create_token("c.third")[0])
    master = _client(ps, root, "a.master", "--tokenizer", str(root / "bpe"))
    assert master.returncode == 0, master.stderr[-3000:]
    version = ps.status()["version"]

    # Act: the third site starts without --tokenizer, then with the federation's
    refused = _client(ps, root, "c.third")
    version_after_refusal = ps.status()["version"]
    joins_after_refusal = ps.logs().count("event=join client=c.third ")
    relaunch = _client(ps, root, "c.third", "--tokenizer", str(root / "bpe"))

    # Assert
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr and last.startswith("geofed client: "), refused.stderr[-3000:]
    assert f"this client's tokenizer 'byte' (sha256 {BYTE_SHA256})" in last, last
    assert f"the federation's tokenizer 'hf:{(root / 'bpe').resolve()}' (sha256 {bpe})" in last, last
    assert "--tokenizer DIR" in last and "was given no --tokenizer" in last, last
    assert joins_after_refusal == 0
    assert version_after_refusal == version
    assert relaunch.returncode == 0, relaunch.stderr[-3000:]
    assert "event=joined client=c.third via=one-time" in relaunch.stderr


def test_a_client_lying_in_its_preview_is_refused_at_join_and_keeps_its_token(site):
    # Arrange: the federation's tokenizer is the master's (the test above, or this one's master)
    ps, root = site
    bpe = ("hf:/a/bpe", tokenizer_sha256(str(root / "bpe")))
    stub = pb_grpc.ParameterServerStub(ps.channel())
    if not ps.status()["has_model"]:
        stub.Join(pb.JoinRequest(token=mint(ps, "a.master", master=True), client_id="a.master",
                                 tokenizer=bpe[0], tokenizer_sha256=bpe[1]), timeout=10)
    token = mint(ps, "d.liar")

    # Act
    preview = stub.Join(pb.JoinRequest(token=token, client_id="d.liar", preview=True, tokenizer=bpe[0],
                                       tokenizer_sha256=bpe[1]), timeout=10)
    code, details = rpc_code(lambda: stub.Join(pb.JoinRequest(
        token=token, client_id="d.liar", tokenizer="byte", tokenizer_sha256=BYTE_SHA256), timeout=10))
    joined = stub.Join(pb.JoinRequest(token=token, client_id="d.liar", tokenizer=bpe[0], tokenizer_sha256=bpe[1]),
                       timeout=10)

    # Assert
    assert preview.tokenizer_sha256 == bpe[1] and not preview.session
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert f"this client's tokenizer 'byte' (sha256 {BYTE_SHA256})" in details
    assert f"(sha256 {bpe[1]})" in details
    assert joined.session and joined.tokenizer_sha256 == bpe[1]
