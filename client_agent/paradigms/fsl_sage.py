"""FSL-SAGE, client half (paper §III-C3d): train the client-side part with an auxiliary model, federate it.

The model is cut after `cut_layer` blocks (`client_agent.split.parts`): this client keeps the
embeddings, the first blocks, the final norm and the tied head, with a small `AuxBlock` where the
server-side blocks were, and trains all of it locally (Algorithm 1's loop, unchanged). The client-side
part is the exchanged vector the PS averages like any parameters; the auxiliary model is private (it
rides in the client checkpoint). Every `align_every` rounds the client sends the smashed activations of
every batch it trained on since the last exchange (`align_batches: 0`, at most 64; or that many fresh
batches) to the server-side trainer (which steps its blocks on each), returns the loss gradient at the
trainer's output, and adopts the auxiliary model the trainer realigned. Only hidden states, their
gradients and the auxiliary weights cross the wire: tokens and labels stay here.
"""

from __future__ import annotations

import logging
import queue

import grpc
import torch
from torch import nn

from geofed.config import FederationConfig
from geofed.paradigms.fsl_sage import FslSageSettings
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed.protocol.channel import open_channel

from ..data.batch import Batch, batch_tokens, next_token_loss
from ..split.parts import aux_prefix, client_model, decode_tensor, encode_tensor, training_state_bytes
from ..split.peak import measured_by, peak_bytes
from ..training.model import build_model
from ..training.trainer import LocalTrainer, TrainStats
from .base import ClientParadigm

log = logging.getLogger("geofed.client")


MAX_EXCHANGE_BATCHES = 64  # the trainer's bound on batches per exchange


class BatchRecorder:
    """The trainer's token stream, keeping a copy of every training batch it hands out (token ids and mask)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.batches: list[Batch] = []

    def next_batch(self, batch_size: int, rank: int = 0, world: int = 1) -> Batch:
        batch = self.stream.next_batch(batch_size, rank, world)
        self.batches.append(batch.to("cpu", copy=True))
        return batch

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


class FslSage(ClientParadigm):
    shell_ok = False  # the client part is built whole here (the server blocks are dropped, never streamed)

    def __init__(self, settings: FslSageSettings) -> None:
        super().__init__(settings)
        self.rounds = 0
        self.ps = None  # the PSClient whose session authenticates us at the trainer
        self.exchanges = 0
        self.full_numel = 0
        self.trained: list[Batch] = []  # token batches trained on since the last exchange

    def build(self, fed: FederationConfig, *, initialise: bool) -> nn.Module:
        self.fed = fed
        model = build_model(fed.model)
        self.full_numel = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        return model

    def prepare(self, model: nn.Module) -> nn.Module:
        model = client_model(model, self.settings.cut_layer, self.settings.aux_width, seed=self.fed.model.seed)
        self._aux = aux_prefix(self.settings.cut_layer)
        return super().prepare(model)

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return not name.startswith(self._aux)

    def trainable(self, name: str, param: nn.Parameter) -> bool:
        return True  # the client part and the private auxiliary model

    def bind_ps(self, ps) -> None:
        self.ps = ps

    def local_update(self, trainer: LocalTrainer, steps: int, deadline: float | None, version: int) -> TrainStats:
        recorder = BatchRecorder(trainer.stream)
        trainer.stream = recorder
        try:
            stats = super().local_update(trainer, steps, deadline, version)
        finally:
            trainer.stream = recorder.stream
        if self.settings.align_batches == 0:  # the server learns from every batch this client trained on
            self.trained = (self.trained + recorder.batches)[-MAX_EXCHANGE_BATCHES:]
        self.rounds += 1
        if self.rounds == 1:
            full = 16 * self.full_numel  # fp32 parameters, gradients and AdamW's two moments
            # Computed training state beside the measured peak (activations, temporaries and runtime included).
            log.info("event=split_memory state_bytes=%d full_model_bytes=%d measured_peak_bytes=%d measured_by=%s",
                     training_state_bytes(trainer.model, trainer.optimizer), full, peak_bytes(trainer.device),
                     measured_by(trainer.device))
        if self.settings.trainer and self.rounds % self.settings.align_every == 0 and self.ps is not None:
            try:
                self.align(trainer)
            except (grpc.RpcError, ValueError) as exc:  # the trainer is down: keep training with the aux as is
                detail = exc.details() if isinstance(exc, grpc.RpcError) else str(exc)
                log.warning("event=split_align_failed error=%r", detail)
        return stats

    def align(self, trainer: LocalTrainer) -> None:
        """One exchange with the server-side trainer (see the module docstring)."""
        model, s = trainer.model, self.settings
        aux = model.transformer.h[s.cut_layer]
        cut_in: dict[str, torch.Tensor] = {}
        hook = aux.register_forward_pre_hook(lambda _m, args: cut_in.__setitem__("a", args[0]))
        requests: queue.Queue = queue.Queue()
        sent = received = 0
        channel = open_channel(s.trainer, **getattr(self.ps, "channel_options", {"insecure": True}))
        stub = pb_grpc.SplitTrainerStub(channel)

        def outgoing():
            while (msg := requests.get()) is not None:
                yield msg

        if s.align_batches:
            batches = [trainer.stream.next_batch(trainer.cfg.batch_size, 0, 1) for _ in range(s.align_batches)]
        else:
            batches, self.trained = self.trained, []
        if not batches:
            raise ValueError("no batch to exchange: this client trained on none since the last exchange")
        try:
            call = stub.Align(outgoing(), metadata=bearer(self.ps.session), timeout=300)
            state = aux.state_dict()
            start = pb.SplitMessage(kind="start", batches=len(batches),
                                    tensors=[self._tensor(n, v) for n, v in state.items()])
            requests.put(start)
            sent += start.ByteSize()
            for recorded in batches:
                batch = recorded.to(trainer.device)
                with torch.no_grad():  # fills cut_in["a"]: the smashed activations
                    model(input_ids=batch_tokens(batch)[:, :-1], use_cache=False)
                acts = pb.SplitMessage(kind="activations", tensors=[self._tensor("a", cut_in["a"])])
                requests.put(acts)
                reply = next(call)
                sent, received = sent + acts.ByteSize(), received + reply.ByteSize()
                h = self._decode(reply).requires_grad_(True)
                logits = model.lm_head(model.transformer.ln_f(h))
                loss = next_token_loss(logits, batch)
                (g_h,) = torch.autograd.grad(loss, h)
                grad = pb.SplitMessage(kind="grad", tensors=[self._tensor("g", g_h)])
                requests.put(grad)
                sent += grad.ByteSize()
            reply = next(call)
            received += reply.ByteSize()
            if reply.kind != "aux":
                raise ValueError(f"the trainer answered {reply.kind!r}, expected 'aux'")
            new = {t.name: decode_tensor(t.data, list(t.shape), 1 << 26) for t in reply.tensors}
            with torch.no_grad():
                aux.load_state_dict(new)
            self.exchanges += 1
            log.info("event=split_aligned exchanges=%d server_loss=%.4f bytes_sent=%d bytes_received=%d",
                     self.exchanges, float(loss.detach()), sent, received)
        finally:
            requests.put(None)
            hook.remove()
            channel.close()

    def _tensor(self, name: str, t: torch.Tensor) -> pb.SplitTensor:
        data, shape = encode_tensor(t, self.settings.codec)
        return pb.SplitTensor(name=name, shape=shape, data=data)

    @staticmethod
    def _decode(msg: pb.SplitMessage) -> torch.Tensor:
        t = msg.tensors[0]
        return decode_tensor(t.data, list(t.shape), 1 << 26)
