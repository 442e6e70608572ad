"""Site-specific preferences: sites that prefer different, equally valid answers to the docstring task.

The docstring task's answer names the parameters a docstring mentions, in signature order; the same names
in alphabetical order (Python's `sorted`, code-point order) answer the question as well. Site i prefers
one order, `ORDERS[i % 2]`: each of its records chooses the answer in its order and rejects the same names
in the other. Only a pair of two or more names whose two orders differ makes a record (any other would
choose what it rejects). Both answers hold the same names and bytes, so no rule on length or content
tells them apart: a model has to learn the site's order.

Each site's own held-out pairs (functions of its own modules it does not train on, `task.stdlib_qa_split`)
and the shared held-out pairs are written in its order too: a site's held-out preference accuracy is
measured on its own preference,
which a single federated model cannot meet for both orders at once (a site's private adapters can).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from client_agent.data.records import Preference

from .preference import write_preferences
from .task import QAPair, stdlib_qa_split

ORDERS = ("signature", "alphabetical")


def in_order(answer: str, order: str) -> str:
    """`answer`'s names (signature order) in `order`."""
    if order == "signature":
        return answer
    if order == "alphabetical":
        return " ".join(sorted(answer.split()))
    raise ValueError(f"no answer order {order!r}; known: {', '.join(ORDERS)}")


def site_order(client: int) -> str:
    """The order client `client` prefers."""
    return ORDERS[client % len(ORDERS)]


def site_preferences(pairs: Sequence[QAPair], order: str) -> list[Preference]:
    """Each pair whose orders differ as a preference: its answer in `order` chosen, in the other rejected."""
    if order not in ORDERS:
        raise ValueError(f"no answer order {order!r}; known: {', '.join(ORDERS)}")
    other = next(o for o in ORDERS if o != order)
    out = []
    for p in pairs:
        chosen, rejected = in_order(p.answer, order), in_order(p.answer, other)
        if chosen != rejected:
            out.append(Preference(p.prompt, f"{chosen}\n", f"{rejected}\n", ""))
    return out


@dataclass(frozen=True)
class SitePreferenceTask:
    """The docstring task's split as per-site preference JSONL: client i's training records and own held-out
    records in `orders[i]`."""

    client_files: tuple[Path, ...]  # `.list` files, a client's `--data`
    own_eval_files: tuple[Path, ...]  # client i's own held-out pairs
    eval_files: tuple[Path, ...]  # the shared held-out pairs in client i's order
    orders: tuple[str, ...]

    @classmethod
    def write(cls, out_dir: Path, n_clients: int, seed: int = 0) -> SitePreferenceTask:
        """The split of `seed` (`task.stdlib_qa_split`) written under `out_dir`, client i in `site_order(i)`."""
        from client_agent.data.corpus import write_file_list

        split = stdlib_qa_split(n_clients, seed)
        orders = tuple(site_order(i) for i in range(n_clients))
        files, own, shared = [], [], []
        for i, order in enumerate(orders):
            data = write_preferences(out_dir / f"client-{i}.jsonl", site_preferences(split.clients[i], order))
            files.append(write_file_list(data.with_suffix(".list"), [data]))
            own.append(write_preferences(out_dir / f"own-eval-{i}.jsonl", site_preferences(split.own_eval[i], order)))
            shared.append(write_preferences(out_dir / f"eval-{i}.jsonl", site_preferences(split.eval, order)))
        return cls(tuple(files), tuple(own), tuple(shared), orders)
