"""`geofed client` with a per-client micro-batch size: the harness's stand-in for a smaller GPU.

Paper §III-C2: each client picks the micro-batch that fits its device and accumulates gradients to the
shared effective batch. The agent takes the micro-batch from the federation settings (one value for
all), so this shim pins it per process by handing `micro_batch_size` to the agent's `LocalTrainer`,
then runs the unmodified `geofed client`. Usage:

    python -m bench.federation.client_shim --micro-batch 2 -- client --ps HOST:PORT ...
"""

from __future__ import annotations

import argparse
import sys


def pin_micro_batch(micro: int) -> None:
    """Make every `LocalTrainer` the agent builds use `micro` sequences per forward pass."""
    from client_agent import agent

    base = agent.LocalTrainer

    class PinnedTrainer(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            kwargs["micro_batch_size"] = micro
            super().__init__(*args, **kwargs)

    agent.LocalTrainer = PinnedTrainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="client_shim", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--micro-batch", type=int, default=0, help="sequences per forward pass (0 = agent default)"
    )
    parser.add_argument("geofed_args", nargs=argparse.REMAINDER, help="-- then the `geofed` command line")
    args = parser.parse_args(argv)
    rest = args.geofed_args[1:] if args.geofed_args[:1] == ["--"] else args.geofed_args
    if args.micro_batch < 0:
        parser.error(f"--micro-batch must be >= 0, got {args.micro_batch}")
    if not rest:
        parser.error("give the geofed command after --, e.g. -- client --ps 127.0.0.1:7443 ...")
    if args.micro_batch:
        pin_micro_batch(args.micro_batch)
    from geofed.cli import main as geofed_main

    return geofed_main(rest)


if __name__ == "__main__":
    sys.exit(main())
