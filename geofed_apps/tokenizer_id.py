"""`geofed tokenizer-id DIR|byte`: a tokenizer's identity, for a federation admin to pin `model.tokenizer_sha256`.

It is the digest every client declares at Join and the PS compares (`geofed.tokenizer_identity`).
"""

from __future__ import annotations

import argparse
import sys


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `geofed tokenizer-id` on the top-level CLI (see `geofed_apps.cli`)."""
    cmd = sub.add_parser("tokenizer-id", help="print a tokenizer's identity (the sha256 model.tokenizer_sha256 pins)",
                         description="Print the sha256 of what decides a tokenizer's ids (vocabulary, merges, special "
                                     "ids): 'byte' for the built-in byte tokenizer, or a local Hugging Face tokenizer "
                                     "directory. Two copies of one tokenizer print the same.")
    cmd.add_argument("tokenizer", metavar="DIR|byte", help="a local Hugging Face tokenizer directory, or 'byte'")
    cmd.set_defaults(func=run_tokenizer_id)


def run_tokenizer_id(args: argparse.Namespace) -> int:
    from geofed.tokenizer_identity import tokenizer_sha256

    try:
        digest = tokenizer_sha256(args.tokenizer)
    except (OSError, ImportError, ValueError) as exc:
        print(f"geofed tokenizer-id: {exc}", file=sys.stderr, flush=True)
        return 2
    print(digest, flush=True)
    return 0
