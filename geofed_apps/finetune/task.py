"""The fine-tuning task: which words of a docstring are the function's parameters, from the stdlib's sources.

Every machine with Python has the data, so nothing is downloaded. Each module-level function or method
whose docstring (the start of it that fits the base model's context) mentions at least one of its
parameters (other than self/cls) gives one example: the context is `# Owner.name: ` and that start of
the docstring, the question "parameters:", the answer the parameters that occur in it as words, in
signature order. The signature is not shown: the answer is extractive, but which of the docstring's
words are parameters has to be learned (from the wording, the markup, Python's naming conventions);
`rules.py` publishes the best few-line rules. Clients get whole top-level modules (non-IID). Two
held-out sets score a model: the shared one, from the modules the base model's pretraining never saw
(`base_model.pretraining_files`), and each client's own, a seeded share of the functions of its own
modules that it does not train on (its domain: what a personalised model is for). A held-out pair whose
answer is also some training pair's answer is dropped from either, so no held-out answer can be recalled
from training.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from client_agent.data.corpus import CorpusError, group_by_module, holdout_modules, stdlib_files, stdlib_root

MAX_CONTEXT_BYTES = 84  # context + "\n# parameters: " + answer + newline fit the base model's 128 bytes
MAX_ANSWER_BYTES = 28
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SENTENCE_END = re.compile(r"[.:;] ")  # a later window starts after one of these
EVAL_FRACTION = 0.1  # held-out modules: the base model never trains on them (base_model.pretraining_files)
OWN_EVAL_FRACTION = 0.2  # of each client's pairs, held out as its own domain's test set
SPLIT_SEED = 0


@dataclass(frozen=True)
class QAPair:
    """One example: `prompt` is what the model sees, `answer` what greedy decoding should produce."""

    doc: str  # the context: `# Owner.name: ` and the start of the docstring
    answer: str

    @property
    def prompt(self) -> str:
        return f"{self.doc}\n# parameters: "

    @property
    def completion(self) -> str:
        """What the model learns to continue the prompt with: the answer and the newline greedy decoding stops at."""
        return f"{self.answer}\n"

    @property
    def text(self) -> str:
        """Prompt and completion as one document."""
        return self.prompt + self.completion


@dataclass(frozen=True)
class QASplit:
    """Per-client training pairs (non-IID by module), the shared held-out pairs and each client's own."""

    clients: tuple[tuple[QAPair, ...], ...]
    eval: tuple[QAPair, ...]
    own_eval: tuple[tuple[QAPair, ...], ...]  # client i's held-out pairs from its own modules


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


def _contexts(owner: str | None, node: ast.FunctionDef | ast.AsyncFunctionDef, windows: bool) -> list[str]:
    """`# Owner.name: docstring` (whitespace collapsed, cut to fit the base model's context); with `windows`,
    also the same from each later sentence of the docstring on. Empty without a docstring."""
    doc = ast.get_docstring(node)
    if not doc:
        return []
    name = f"{owner}.{node.name}" if owner else node.name
    text = " ".join(doc.split())
    starts = [0] + ([m.end() for m in _SENTENCE_END.finditer(text)] if windows else [])
    return list(dict.fromkeys(f"# {name}: {text[i:]}"[:MAX_CONTEXT_BYTES].rstrip() for i in starts))


def _function_pairs(source: str, windows: bool) -> list[tuple[QAPair, ...]]:
    """Per function whose first window names a parameter: its pairs, the first window's first."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    scopes: list[tuple[str | None, list[ast.stmt]]] = [(None, tree.body)]
    scopes += [(n.name, n.body) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for owner, body in scopes:
        for node in body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            pairs = []
            for context in _contexts(owner, node, windows):
                if not context.isascii():
                    continue
                answer = _answer(context, _parameters(node.args))
                if answer and len(answer.encode()) <= MAX_ANSWER_BYTES:
                    pairs.append(QAPair(context, answer))
                elif not pairs:
                    break  # the first window names none: the function gives no pair
            if pairs:
                out.append(tuple(pairs))
    return out


def pairs_from_source(source: str) -> list[QAPair]:
    """Every module-level function and method whose shown docstring names at least one of its parameters."""
    return [pairs[0] for pairs in _function_pairs(source, windows=False)]


@functools.lru_cache(maxsize=4096)
def _windows_of_file(path: Path) -> dict[QAPair, tuple[QAPair, ...]]:
    """One file's functions: first-window pair -> every window's pair, parsed once per process."""
    source = Path(path).read_text(encoding="utf-8", errors="replace")
    return {pairs[0]: pairs for pairs in _function_pairs(source, windows=True)}


@functools.lru_cache(maxsize=4096)
def _pairs_of_file(path: Path) -> tuple[QAPair, ...]:
    """One file's pairs, parsed once per process (the stdlib does not change while it runs)."""
    return tuple(pairs_from_source(path.read_text(encoding="utf-8", errors="replace")))


def pairs_from_files(files: Iterable[Path]) -> list[QAPair]:
    """Pairs of `files` in order, duplicates (same signature) kept once."""
    seen: set[QAPair] = set()
    out = []
    for path in files:
        for pair in _pairs_of_file(Path(path)):
            if pair not in seen:
                seen.add(pair)
                out.append(pair)
    return out


def with_windows(pairs: Sequence[QAPair], files: Iterable[Path], refused: set[str]) -> list[QAPair]:
    """`pairs` (first windows of `files`' functions), each followed by its function's later windows whose answer
    is not in `refused` (the held-out answers), duplicates kept once."""
    windows: dict[QAPair, tuple[QAPair, ...]] = {}
    for path in files:
        windows.update(_windows_of_file(Path(path)))
    out = [w for p in pairs for w in windows.get(p, (p,)) if w == p or w.answer not in refused]
    return list(dict.fromkeys(out))


def _answer(context: str, parameters: Sequence[str]) -> str:
    """The task's answer for `context`: the parameters that occur as words in its docstring, in order."""
    words = set(_WORD.findall(context.partition(": ")[2]))
    return " ".join(p for p in parameters if p in words)


def renamed(pair: QAPair, names: Sequence[str], rng: np.random.Generator) -> QAPair | None:
    """`pair` with each of its answer's parameters renamed, in the docstring and the answer alike, to a name
    drawn from `names` that the docstring does not already use; None when the renamed docstring, cut to fit
    the context again, names no parameter or the answer no longer fits."""
    head, sep, doc = pair.doc.partition(": ")
    params = pair.answer.split()
    used = set(_WORD.findall(doc))
    free = [n for n in names if n not in used]
    if len(free) < len(params):
        return None
    new = dict(zip(params, (free[i] for i in rng.choice(len(free), len(params), replace=False)), strict=True))
    pattern = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, params)) + r")(?![A-Za-z0-9_])")
    context = f"{head}{sep}{pattern.sub(lambda m: new[m.group(1)], doc)}"[:MAX_CONTEXT_BYTES].rstrip()
    answer = _answer(context, [new[p] for p in params])
    if not answer or len(answer.encode()) > MAX_ANSWER_BYTES:
        return None
    return QAPair(context, answer)


def with_renamings(pairs: Sequence[QAPair], copies: int, refused: set[str], rng: np.random.Generator) -> list[QAPair]:
    """`pairs`, then `copies` rounds of each pair with its parameters renamed (`renamed`) to words of `pairs`'
    docstrings (two characters or more) and answers, none of them a name in `refused` (the held-out answers').

    Drawing from every word, not only from parameter names, keeps a model from learning which words tend to
    be parameters instead of reading them from the docstring. The copies are synthetic: a real docstring
    names its parameters with words that fit their meaning and its prose around them, while a copy may put
    an unrelated word (`returns`, `buffer`) where a parameter stood, so its text reads less naturally than
    the held-out docstrings the model is scored on."""
    words = {w for p in pairs for w in _WORD.findall(p.doc.partition(": ")[2]) if len(w) > 1}
    names = sorted((words | {n for p in pairs for n in p.answer.split()}) - refused)
    out = list(pairs)
    for _ in range(copies):
        out += [r for p in pairs if (r := renamed(p, names, rng)) is not None]
    return list(dict.fromkeys(out))


def split_modules(files: Sequence[Path], n_clients: int, seed: int, root: Path) -> list[list[Path]]:
    """Whole top-level modules dealt to clients in a seeded order, each to the one with the fewest bytes."""
    groups = group_by_module(files, root)
    if len(groups) < n_clients:
        raise CorpusError(f"only {len(groups)} modules to share among {n_clients} clients; use fewer clients")
    names = sorted(groups)
    bins: list[list[Path]] = [[] for _ in range(n_clients)]
    loads = [0] * n_clients
    for i in np.random.default_rng(seed).permutation(len(names)):
        paths = groups[names[i]]
        least = loads.index(min(loads))
        bins[least] += paths
        loads[least] += sum(p.stat().st_size for p in paths)
    return bins


def _own_held_out(pairs: Sequence[QAPair], rng: np.random.Generator) -> tuple[list[QAPair], list[QAPair]]:
    """(training, held-out): `OWN_EVAL_FRACTION` of `pairs`, chosen by `rng`, held out; order kept."""
    held = set(rng.permutation(len(pairs))[: round(OWN_EVAL_FRACTION * len(pairs))].tolist())
    return [p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held]


def stdlib_qa_split(n_clients: int, seed: int = SPLIT_SEED, windows: bool = False, renamings: int = 0) -> QASplit:
    """The task: the fixed held-out modules for eval, the rest split by module across clients by `seed`,
    each client keeping a seeded share of its own pairs back as its own held-out set.

    The shared held-out modules do not depend on `seed` (they are the base model's, `SPLIT_SEED`'s), so
    runs with different client splits are scored on the same shared pairs. With `windows`, each training
    function also gives a pair per later sentence of its docstring that names a parameter (unless that
    answer is a held-out one); the held-out sets are the same as without. With `renamings`, each client
    also trains on that many copies of its pairs with the parameters renamed to other words of its own
    pairs' docstrings (`with_renamings`; never a name of a held-out answer): the answers then have to be
    read from the docstring, not recalled.
    """
    root = stdlib_root()
    train, held = holdout_modules(stdlib_files(root=root), EVAL_FRACTION, SPLIT_SEED, root)
    client_files = split_modules(train, n_clients, seed, root)
    dealt = [pairs_from_files(files) for files in client_files]
    kept = [_own_held_out(pairs, np.random.default_rng([seed, i])) for i, pairs in enumerate(dealt)]
    trained = {p.answer for pairs, _ in kept for p in pairs}
    seen = {p.answer for pairs in dealt for p in pairs}  # the same for every seed: so is the shared set
    shared = tuple(p for p in pairs_from_files(held) if p.answer not in seen)
    own = tuple(tuple(p for p in own if p.answer not in trained) for _, own in kept)
    clients = [list(pairs) for pairs, _ in kept]
    if windows:
        refused = {p.answer for p in shared} | {p.answer for pairs in own for p in pairs}
        clients = [with_windows(pairs, files, refused) for pairs, files in zip(clients, client_files, strict=True)]
    if renamings:
        held_names = {n for p in (*shared, *(p for pairs in own for p in pairs)) for n in p.answer.split()}
        clients = [with_renamings(pairs, renamings, held_names, np.random.default_rng([seed, i, 1]))
                   for i, pairs in enumerate(clients)]
    return QASplit(clients=tuple(tuple(pairs) for pairs in clients), eval=shared, own_eval=own)


def write_pairs(path: Path, pairs: Sequence[QAPair]) -> Path:
    """JSONL prompt/completion records (what clients train on, the loss on the completion only;
    `client_agent.data.files` reads them) plus `doc` and `answer` (what `read_pairs` scores with)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in pairs:
            record = {"prompt": p.prompt, "completion": p.completion, "doc": p.doc, "answer": p.answer}
            f.write(json.dumps(record) + "\n")
    return path


def read_pairs(path: Path) -> list[QAPair]:
    """Pairs written by `write_pairs`."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append(QAPair(rec["doc"], rec["answer"]))
    return out


def write_split(split: QASplit, out_dir: Path) -> tuple[list[Path], Path, list[Path]]:
    """`client-<i>.jsonl` per client, `eval.jsonl` and `own-eval-<i>.jsonl` per client; returns (client
    files, shared eval file, own eval files)."""
    out_dir = Path(out_dir)
    clients = [write_pairs(out_dir / f"client-{i}.jsonl", pairs) for i, pairs in enumerate(split.clients)]
    own = [write_pairs(out_dir / f"own-eval-{i}.jsonl", pairs) for i, pairs in enumerate(split.own_eval)]
    return clients, write_pairs(out_dir / "eval.jsonl", split.eval), own
