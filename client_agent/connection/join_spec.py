"""What a client declares at Join, and how long its calls to the PS may take."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from geofed.config import FederationConfig
from geofed.manifest import Manifest


@dataclass(frozen=True)
class Timeouts:
    """How long one RPC, one push and the whole Join may take, and how long a failed push is retried."""

    rpc_s: float = 30.0
    push_s: float = 3600.0
    join_s: float = 60.0
    retry_s: float = 600.0


def _no_decoders(fed: FederationConfig) -> Mapping:
    return {}


@dataclass(frozen=True)
class JoinSpec:
    """What a client declares at Join, and how it decodes the model stream of the federation it joins.

    `paradigm` and `manifest`: what it ran before (a relaunch reads them from its checkpoint; empty when
    unknown); the PS refuses a mismatch. `paradigm_json` and `frozen_digest`: the paradigm settings its
    model was built under and the sha256 of the frozen part it built (`ClientParadigm.frozen_digest`);
    the PS refuses other settings or another digest than the federation's, naming the difference.
    `tokenizer` and `tokenizer_sha256`: the name and identity of the tokenizer it tokenises with
    (`geofed.tokenizer_identity`); the PS refuses another than the federation's. `group`: multi-PS, the
    client's group; the PS refuses a client of another group. `decoders`: the
    paradigm's own downlink encodings for the federation joined (its `ClientParadigm.downlink_decoders`),
    by encoding name.
    """

    paradigm: str = ""
    manifest: Manifest = ()
    group: str = ""
    decoders: Callable[[FederationConfig], Mapping] = _no_decoders
    paradigm_json: str = ""
    frozen_digest: str = ""
    tokenizer: str = ""
    tokenizer_sha256: str = ""
