"""`geofed local --data`: the user's files read and checked whole before the PS and the clients start.

Every file counts by `client_agent.data.files`'s rule (the one `geofed client --data` applies), so a file the
launcher accepts is one every client reads, and an unusable one (binary, not UTF-8, a JSONL line of no
known schema, text mixed with pairs) stops the launcher with one line before anything starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geofed.config import FederationConfig

if TYPE_CHECKING:
    from .finetune.user_task import UserSplit


def check_user_data(data: str | None, eval_data: str | None, fed: FederationConfig, n_clients: int, seed: int,
                    *, pairs: bool) -> UserSplit | None:
    """Read and check every file of `data` and `eval_data` (a DataError on the first unusable one); with
    `pairs` (a fine-tuning preset), the user's pairs split across `n_clients`, else None."""
    from client_agent.data.files import collect_files, tokenize_files

    from .finetune.user_task import tokenizer_of

    if not data:
        return None
    tokenizer = tokenizer_of(fed)
    if pairs:
        from .finetune.user_task import UserSplit

        return UserSplit.read(data, eval_data, n_clients, seed, fed.training.eval_fraction, tokenizer,
                              fed.model.block_size)
    for source in (data, eval_data):
        if source is not None:
            tokenize_files(collect_files(source), tokenizer)
    return None
