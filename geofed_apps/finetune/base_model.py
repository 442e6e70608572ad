"""The fine-tuning base model: pretrained by the project itself with `geofed local`, cached, reused.

`ensure_base_model()` returns a transformers model directory. The first call runs a short `geofed local`
pretraining federation on the standard library's sources (the same held-out modules as the QA task's
eval split) and moves its `final_model/` into the cache; later calls return the cached copy. Nothing is
fetched from a hub. One command: `python -m geofed_apps.finetune.base_model [--cache DIR]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

BASE_CLIENTS = 2
BASE_SECONDS = 240.0  # a few minutes on 2 CPU cores: enough to learn Python's surface syntax
BASE_OVERRIDES: tuple[str, ...] = ()


def default_cache() -> Path:
    """`$GEOFED_CACHE`, else `~/.cache/geofed`."""
    return Path(os.environ.get("GEOFED_CACHE") or Path.home() / ".cache" / "geofed")


def base_key() -> str:
    """What the base model depends on: the model's shape, the recipe and this Python's stdlib version.

    Not the rest of `geofed local`'s defaults (codec, aggregation): a tuning of those must not throw a
    cached base away and retrain it.
    """
    from geofed.config import FederationConfig
    from geofed_apps.local import LOCAL_DEFAULTS

    model = FederationConfig.model_validate(LOCAL_DEFAULTS).model.model_dump(mode="json")
    recipe = {"model": model, "clients": BASE_CLIENTS, "seconds": BASE_SECONDS,
              "overrides": BASE_OVERRIDES, "python": sys.version_info[:2]}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def ensure_base_model(cache: Path | None = None, *, say=print) -> Path:
    """The cached base model directory, pretrained now when missing."""
    from geofed_apps.local import LocalOptions, run_local_federation

    target = (cache or default_cache()) / f"base-{base_key()}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    say(f"pretraining the base model once ({BASE_CLIENTS} clients, {BASE_SECONDS:.0f}s); cached at {target}")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pretrain-") as tmp:
        opts = LocalOptions(clients=BASE_CLIENTS, duration_s=BASE_SECONDS, run_dir=tmp, quiet=True,
                            overrides=list(BASE_OVERRIDES))
        if run_local_federation(opts) != 0:
            raise RuntimeError(f"pretraining the base model failed; see the logs under {tmp}")
        (final,) = Path(tmp).glob("*/final_model")
        staged = Path(tmp) / "staged"
        shutil.move(str(final), staged)
        try:
            os.replace(staged, target)
        except OSError:  # another process cached it first
            if not (target / "config.json").is_file():
                raise
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pretrain (once) and print the cached fine-tuning base model.")
    parser.add_argument("--cache", type=Path, help="cache directory (default $GEOFED_CACHE or ~/.cache/geofed)")
    args = parser.parse_args(argv)
    print(ensure_base_model(args.cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
