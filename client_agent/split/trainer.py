"""FSL-SAGE's server-side trainer (paper §III-C3d): its own process and gRPC service, beside the torch-free PS.

    python -m client_agent.split.trainer --federation fed.yaml --ps HOST:PORT --peer-token-file F \
        --port 7450 --out DIR (--tls-cert C --tls-key K [--ca PS_CA] | --insecure) [--ready-file R]

It holds the server-side blocks (`ServerPart`, seeded like every client's model). A client's `Align` call
sends its auxiliary model and a few batches of smashed activations; per batch the trainer answers the
blocks' output, takes back the loss gradient at that output (the client holds the head and the labels:
a U-shaped split) and steps its blocks; then it realigns the client's auxiliary model to the blocks as
they are after those steps (outputs and input-gradients matched on those batches, FSL-SAGE's gradient
alignment) and sends it back.
Clients authenticate with their PS session, which the trainer checks with the PS (`Peer.CheckSession`,
authenticated by the federation's peer secret). The blocks are saved (safetensors) after every exchange
and reloaded on restart.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import torch
from safetensors.torch import load_file, save_file

from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import AUTH_KEY, credential_from
from geofed.protocol.channel import open_channel
from geofed.stop_signals import wait_for_stop_signal

from .parts import AuxBlock, ServerPart, decode_tensor, encode_tensor

log = logging.getLogger("geofed.split")

MAX_NUMEL = 1 << 26  # largest activation batch accepted (elements)
MAX_BATCHES = 64
STATE_FILE = "server-part.safetensors"


class SessionChecker:
    """Asks the PS whose session a credential is; remembers answers for `ttl_s`."""

    def __init__(self, ps: str, secret: str, *, insecure: bool, ca: bytes | None = None, ttl_s: float = 30.0):
        self.stub = pb_grpc.PeerStub(open_channel(ps, insecure=insecure, ca_cert=ca))
        self.metadata = ((AUTH_KEY, f"Peer {secret}"),)
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[str, float]] = {}

    def client_id(self, session: str) -> str:
        hit = self._cache.get(session)
        if hit and hit[1] > time.monotonic():
            return hit[0]
        r = self.stub.CheckSession(pb.CheckSessionRequest(session=session), metadata=self.metadata, timeout=10)
        if r.client_id:
            self._cache[session] = (r.client_id, time.monotonic() + self.ttl_s)
        return r.client_id


def align_aux(aux: AuxBlock, pairs: list[tuple[torch.Tensor, ...]], steps: int, lr: float = 3e-3) -> float:
    """Fit `aux` to the server part on (A, H, g_H, g_A): outputs H and input gradients g_A; the last loss."""
    opt = torch.optim.Adam(aux.parameters(), lr=lr)
    loss_value = 0.0
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        total = torch.zeros(())
        for a, h, g_h, g_a in pairs:
            a = a.clone().requires_grad_(True)
            out = aux(a)
            scale = ((h - a) ** 2).mean() + 1e-8
            l_out = ((out - h) ** 2).mean() / scale
            (v,) = torch.autograd.grad((out * g_h).sum(), a, create_graph=True)
            l_grad = ((v - g_a) ** 2).sum() / ((g_a**2).sum() + 1e-12)
            total = total + l_out + l_grad
        total.backward()
        opt.step()
        loss_value = float(total.detach()) / max(1, len(pairs))
    return loss_value


def alignment_targets(
    part: ServerPart, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> list[tuple[torch.Tensor, ...]]:
    """(A, H, g_H, g_A) per (activations A, output gradient g_H): H = part(A) and g_A = J_part(A)ᵀ g_H, with
    the part's current weights (no parameter gradient is kept)."""
    out = []
    for a, g_h in batches:
        a = a.detach().clone().requires_grad_(True)
        h = part(a)
        (g_a,) = torch.autograd.grad(h, a, grad_outputs=g_h)
        out.append((a.detach(), h.detach(), g_h, g_a.detach()))
    return out


class SplitTrainerServicer(pb_grpc.SplitTrainerServicer):
    """The server-side blocks and the Align exchange (see the module docstring)."""

    def __init__(self, fed: FederationConfig, out_dir: Path, sessions: SessionChecker | None) -> None:
        self.fed, self.settings = fed, fed.paradigm
        self.part = ServerPart(fed.model, self.settings.cut_layer)
        self.opt = torch.optim.AdamW(self.part.blocks.parameters(), lr=self.settings.server_lr)
        self.out = out_dir
        self.out.mkdir(parents=True, exist_ok=True)
        self.sessions = sessions
        self.lock = threading.Lock()  # one model: exchanges take turns
        self.exchanges = 0
        if (self.out / STATE_FILE).exists():
            self.part.load_block_state(load_file(self.out / STATE_FILE))
            log.info("event=split_resume path=%s", self.out / STATE_FILE)

    def _client(self, context: grpc.ServicerContext) -> str:
        session = credential_from(context.invocation_metadata(), "Bearer")
        who = self.sessions.client_id(session) if (session and self.sessions) else ""
        if not who:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "no live PS session: join the federation's PS first")
        return who

    def _next(self, requests, kind: str, context) -> pb.SplitMessage:
        msg = next(requests, None)
        if msg is None or msg.kind != kind:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"expected a {kind!r} message")
        return msg

    def _tensor(self, msg: pb.SplitMessage, context, index: int = 0) -> torch.Tensor:
        try:
            t = msg.tensors[index]
            return decode_tensor(t.data, list(t.shape), MAX_NUMEL)
        except (IndexError, ValueError, Exception) as exc:  # noqa: BLE001 - any malformed tensor is refused
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed tensor: {exc}")

    def _encode(self, name: str, t: torch.Tensor) -> pb.SplitTensor:
        data, shape = encode_tensor(t, self.settings.codec)
        return pb.SplitTensor(name=name, shape=shape, data=data)

    def Align(self, requests, context):
        client = self._client(context)
        start = self._next(requests, "start", context)
        if not 1 <= start.batches <= MAX_BATCHES:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"batches must be 1..{MAX_BATCHES}")
        aux = AuxBlock(self.fed.model.n_embd, self.settings.aux_width)
        names = [n for n, _ in aux.named_parameters()]
        try:
            aux.load_state_dict({t.name: decode_tensor(t.data, list(t.shape), MAX_NUMEL) for t in start.tensors})
        except (RuntimeError, ValueError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"auxiliary model does not fit: {exc}")
        with self.lock:
            pairs = []
            for _ in range(start.batches):
                a = self._tensor(self._next(requests, "activations", context), context)
                if a.dim() != 3 or a.shape[-1] != self.fed.model.n_embd:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"activations must be [B, T, {self.fed.model.n_embd}]")
                a.requires_grad_(True)
                h = self.part(a)
                yield pb.SplitMessage(kind="outputs", tensors=[self._encode("outputs", h)])
                g_h = self._tensor(self._next(requests, "grad", context), context)
                if g_h.shape != h.shape:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "gradient shape differs from the outputs'")
                self.opt.zero_grad(set_to_none=True)
                (h * g_h).sum().backward()  # d loss / d blocks
                self.opt.step()
                pairs.append((a.detach(), g_h))
            # The auxiliary model is fitted to the blocks as they are now, after this exchange's steps.
            pairs = alignment_targets(self.part, pairs)
            misfit = align_aux(aux, pairs, self.settings.align_steps)
            self.exchanges += 1
            self._save()
        log.info("event=split_align client=%s batches=%d aux_misfit=%.4f exchanges=%d", client, len(pairs), misfit,
                 self.exchanges)
        state = aux.state_dict()
        yield pb.SplitMessage(kind="aux", tensors=[self._encode(n, state[n]) for n in names])

    def _save(self) -> None:
        tmp = self.out / (STATE_FILE + ".tmp")
        save_file({k: v.contiguous() for k, v in self.part.block_state().items()}, str(tmp))
        os.replace(tmp, self.out / STATE_FILE)


def serve(argv: list[str] | None = None) -> int:
    from geofed.cli_flags import apply_overrides, load_settings_file, validate_settings
    from geofed.logs import setup_logging

    ap = argparse.ArgumentParser(prog="python -m client_agent.split.trainer", description=__doc__.splitlines()[0])
    ap.add_argument("--federation", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--ps", required=True, help="the PS that vouches for client sessions")
    ap.add_argument("--peer-token-file", required=True)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=7450)
    ap.add_argument("--out", required=True, help="directory for the server-side blocks (safetensors)")
    ap.add_argument("--insecure", action="store_true", help="plaintext, to clients and to the PS (local use only)")
    ap.add_argument("--tls-cert", help="PEM certificate clients see (the PS's CA must have signed it)")
    ap.add_argument("--tls-key", help="PEM key of --tls-cert")
    ap.add_argument("--ca", help="PEM CA of the PS's certificate, to check sessions over TLS")
    ap.add_argument("--ready-file")
    args = ap.parse_args(argv)
    setup_logging("INFO")
    fed = validate_settings(FederationConfig, apply_overrides(load_settings_file(args.federation), args.set))
    if not fed.paradigm.needs_trainer:
        print(f"split trainer: the federation runs paradigm {fed.paradigm.name!r}, which needs no split trainer",
              flush=True)
        return 2
    torch.set_num_threads(1)
    secret = Path(args.peer_token_file).read_text().strip()
    ca = Path(args.ca).read_bytes() if args.ca else None
    servicer = SplitTrainerServicer(fed, Path(args.out), SessionChecker(args.ps, secret, insecure=args.insecure, ca=ca))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_receive_message_length", 256 << 20),
                                  ("grpc.max_send_message_length", 256 << 20)])
    pb_grpc.add_SplitTrainerServicer_to_server(servicer, server)
    address = f"{args.host}:{args.port}"
    if args.insecure:
        port = server.add_insecure_port(address)
    elif args.tls_cert and args.tls_key:
        key, cert = Path(args.tls_key).read_bytes(), Path(args.tls_cert).read_bytes()
        port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
    else:
        print("split trainer: TLS needs --tls-cert and --tls-key (or --insecure for local use only)", flush=True)
        return 2
    server.start()
    log.info("event=split_listening port=%d cut_layer=%d", port, fed.paradigm.cut_layer)
    if args.ready_file:
        Path(args.ready_file).write_text(str(port))
    log.info("event=signal signal=%s", wait_for_stop_signal().name)
    server.stop(5).wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
