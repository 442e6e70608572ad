"""A Byzantine `geofed client` for the attack benchmark: it trains like any client, then pushes a poisoned delta.

    GEOFED_ATTACK=sign_flip|scaled|noise python bench/attack_client.py client --insecure ...

The attack is applied where the client encodes its delta (the codec its `LinkTuner` makes for each round is
wrapped), so everything else (joining, streaming, training, error feedback, retries) is the real client's:

- sign_flip: −δ (pulls the model back the way honest clients push it);
- scaled: 10·δ (a boosted update, the usual model-replacement trick);
- noise: Gaussian noise with 10 × the RMS of δ, independent of the data.
Training on corrupted data needs no wrapper: the benchmark gives a plain client random text.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import client_agent.link_tuner as link_tuner
from geofed.codec import make_codec

SCALE = 10.0


def poison(values: np.ndarray, attack: str, rng: np.random.Generator) -> np.ndarray:
    """The delta the attacker sends instead of `values`."""
    if attack == "sign_flip":
        return -values
    if attack == "scaled":
        return SCALE * values
    if attack == "noise":
        rms = float(np.sqrt(np.mean(values.astype(np.float64) ** 2))) or 1e-3
        return (rng.standard_normal(values.size) * SCALE * rms).astype(np.float32)
    raise ValueError(f"unknown attack {attack!r}")


class PoisonedCodec:
    """The round's codec, encoding the poisoned delta instead of the honest one."""

    def __init__(self, inner, attack: str, rng: np.random.Generator) -> None:
        self.inner, self.attack, self.rng = inner, attack, rng

    @property
    def name(self) -> str:
        return self.inner.name

    def encode(self, flat: np.ndarray, **kw):
        return self.inner.encode(np.ascontiguousarray(poison(flat, self.attack, self.rng), np.float32), **kw)


def main() -> int:
    attack = os.environ["GEOFED_ATTACK"]
    rng = np.random.default_rng(int(os.environ.get("GEOFED_ATTACK_SEED", "0")))
    link_tuner.make_codec = lambda *a, **k: PoisonedCodec(make_codec(*a, **k), attack, rng)
    from geofed_apps.cli import main as geofed_main

    return geofed_main()


if __name__ == "__main__":
    sys.exit(main())
