"""The fine-tuning task: extractive QA over function signatures from the Python standard library's sources.

Every machine with Python has the data, so nothing is downloaded. Each function or method with at
least one parameter (other than self/cls) gives one example, SQuAD-style: the context is its `def` line,
the question "parameters:", the answer the parameters' names in order (defaults, annotations, `*` and
`/` dropped; `*args` and `**kwargs` by name). Clients get whole top-level modules (non-IID, as in
pretraining); the held-out split is the pretraining run's held-out modules
(`client_agent.corpus.stdlib_split`'s seeded 2%), so the cached base model never saw a held-out function.
A first attempt, "docstring → function name", was too hard for a model pretrained in minutes (held-out
F1 under 1% after full fine-tuning), so no paradigm could be told apart from another on it.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from client_agent.corpus import holdout_modules, split_by_module, stdlib_files, stdlib_root

MAX_PROMPT_BYTES = 88  # prompt + answer must fit the base model's 128-byte context
MAX_ANSWER_BYTES = 36
EVAL_FRACTION = 0.02  # the pretraining split's: held-out QA pairs come from modules the base never saw
SPLIT_SEED = 0


@dataclass(frozen=True)
class QAPair:
    """One example: `prompt` is what the model sees, `answer` what greedy decoding should produce."""

    doc: str  # the context: the function's `def` line
    answer: str

    @property
    def prompt(self) -> str:
        return f"{self.doc}\n# parameters: "

    @property
    def text(self) -> str:
        """The training document: prompt, answer, newline."""
        return f"{self.prompt}{self.answer}\n"


@dataclass(frozen=True)
class QASplit:
    """Per-client training pairs (non-IID by module) and the held-out pairs."""

    clients: tuple[tuple[QAPair, ...], ...]
    eval: tuple[QAPair, ...]


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    return f"{prefix} {node.name}({ast.unparse(node.args)}):"


def _parameters(args: ast.arguments) -> list[str]:
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    if args.vararg:
        names.append(args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append(args.kwarg.arg)
    return names


def pairs_from_source(source: str) -> list[QAPair]:
    """Every function of one module's source with a parameter, a short signature and no annotation."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            params = _parameters(node.args)
            sig, answer = _signature(node), " ".join(params)
            if params and len(QAPair(sig, "").prompt.encode()) <= MAX_PROMPT_BYTES \
                    and len(answer.encode()) <= MAX_ANSWER_BYTES and sig.isascii():
                out.append(QAPair(sig, answer))
    return out


def pairs_from_files(files: Iterable[Path]) -> list[QAPair]:
    """Pairs of `files` in order, duplicates (same signature) kept once."""
    seen: set[QAPair] = set()
    out = []
    for path in files:
        for pair in pairs_from_source(Path(path).read_text(encoding="utf-8", errors="replace")):
            if pair not in seen:
                seen.add(pair)
                out.append(pair)
    return out


def stdlib_qa_split(n_clients: int, seed: int = SPLIT_SEED) -> QASplit:
    """The task as every preset uses it: held-out modules for eval, the rest split by module."""
    root = stdlib_root()
    train, held = holdout_modules(stdlib_files(root=root), EVAL_FRACTION, seed, root)
    eval_pairs = pairs_from_files(held)
    banned = set(eval_pairs)
    clients = []
    for files in split_by_module(train, n_clients, seed, root):
        clients.append(tuple(p for p in pairs_from_files(files) if p not in banned))
    return QASplit(clients=tuple(clients), eval=tuple(eval_pairs))


def write_pairs(path: Path, pairs: Sequence[QAPair]) -> Path:
    """JSONL with `text` (what clients train on; `client_agent.data` reads it) plus `doc` and `answer`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps({"text": p.text, "doc": p.doc, "answer": p.answer}) + "\n")
    return path


def read_pairs(path: Path) -> list[QAPair]:
    """Pairs written by `write_pairs`."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append(QAPair(rec["doc"], rec["answer"]))
    return out


def write_split(split: QASplit, out_dir: Path) -> tuple[list[Path], Path]:
    """`client-<i>.jsonl` per client and `eval.jsonl`; returns (client files, eval file)."""
    out_dir = Path(out_dir)
    clients = [write_pairs(out_dir / f"client-{i}.jsonl", pairs) for i, pairs in enumerate(split.clients)]
    return clients, write_pairs(out_dir / "eval.jsonl", split.eval)
