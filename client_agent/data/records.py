"""JSONL records: the schemas a site's data may use, each read as a text document or a prompt/completion pair.

One schema per record, recognised by its keys:

- `prompt`/`completion`: the pair as given;
- `prompt`/`chosen`/`rejected` (a preference): `chosen` is the better completion of the prompt; read as a
  `Preference`, whose (prompt, chosen) is the pair the site's eval loss is measured on. Only a paradigm
  that trains on preferences takes them (`client_agent.preflight` checks it before Join), so a record
  with `completion` too mixes two schemas and is refused;
- `instruction`/`input`/`output` (Alpaca): the prompt is the instruction, then a blank line and the input
  when there is one; the completion is the output;
- `text`: a text document;
- `messages`: a chat, a list of `{role, content}` whose last message is the assistant's; rendered with the
  tokenizer's chat template (the earlier messages with the generation prompt are the prompt, the rest of
  the rendered chat the completion). A tokenizer without a chat template (the byte tokenizer) cannot
  render one, so such data is refused, not read as something else.

A preference's three fields are non-empty strings and its `chosen` differs from its `rejected`.
Anything else (a line that is not JSON, a record of no schema or of two) is a DataError naming the file,
the line and the schemas expected: a site never trains on silently fewer records than it holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

SCHEMAS = "prompt/completion, prompt/chosen/rejected, instruction/input/output, text or messages"
PREFERENCE_KEYS = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class Preference:
    """One preference record: `chosen` is the better completion of `prompt` than `rejected`."""

    prompt: str
    chosen: str
    rejected: str
    where: str  # path:line


Record = str | tuple[str, str] | Preference  # a text document, (prompt, completion), or a preference

# Each schema's keys (a record holding any of them is of that schema), and of those the ones it requires.
_KEYS = {
    "prompt/completion": (("prompt", "completion"), ("prompt", "completion")),
    "preference": (("chosen", "rejected"), PREFERENCE_KEYS),
    "instruction/input/output": (("instruction", "input", "output"), ("instruction", "output")),
    "text": (("text",), ("text",)),
    "messages": (("messages",), ("messages",)),
}


class DataError(ValueError):
    """Training data that cannot be used; one readable line."""


def _strings(record: dict, keys: tuple[str, ...], where: str) -> list[str]:
    """The values of `keys`, each a string, or a DataError naming the first that is not."""
    for key in keys:
        if not isinstance(record[key], str):
            raise DataError(f"{where}: {key!r} must be a string, got {type(record[key]).__name__}")
    return [record[k] for k in keys]


def _schema(record: dict, where: str) -> str:
    """The one schema whose keys the record has (any of them: a partial record names what it lacks)."""
    found = [name for name, (keys, _) in _KEYS.items() if any(k in record for k in keys)]
    if "preference" in found and "completion" not in record:  # its `prompt` names no prompt/completion record
        found = [name for name in found if name != "prompt/completion"]
    if not found:
        raise DataError(f"{where}: a record with keys {sorted(record)[:6]} matches no schema (expected {SCHEMAS})")
    if len(found) > 1:
        raise DataError(f"{where}: a record mixes the {' and '.join(found)} schemas; give one per record")
    missing = [k for k in _KEYS[found[0]][1] if k not in record]
    if missing:
        expected = f" (expected {', '.join(PREFERENCE_KEYS)})" if found[0] == "preference" else ""
        raise DataError(f"{where}: a {found[0]} record has no {missing[0]!r} field{expected}")
    return found[0]


def read_preference(record: object, where: str) -> Preference:
    """A JSON value as a preference; a DataError naming `where` when it is not one."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: a preference record must be a JSON object, got {type(record).__name__}")
    if "chosen" not in record and "rejected" not in record:
        raise DataError(f"{where}: not a preference record (expected {', '.join(PREFERENCE_KEYS)})")
    _schema(record, where)
    for key in PREFERENCE_KEYS:
        if not isinstance(record[key], str) or not record[key]:
            raise DataError(f"{where}: {key!r} must be a non-empty string")
    if record["chosen"] == record["rejected"]:
        raise DataError(f"{where}: 'chosen' and 'rejected' are the same completion; a pair must differ")
    return Preference(record["prompt"], record["chosen"], record["rejected"], where)


def _chat(tokenizer: object, messages: object, where: str) -> tuple[str, str]:
    """(prompt, completion) of a chat rendered with the tokenizer's chat template."""
    render = getattr(tokenizer, "render_chat", None)
    if render is None or not getattr(tokenizer, "has_chat_template", False):
        raise DataError(f"{where}: a messages record needs a tokenizer with a chat template; "
                        f"the {getattr(tokenizer, 'name', '?')} tokenizer has none (give prompt/completion records)")
    ok = isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages)
    if not ok:
        raise DataError(f"{where}: 'messages' must be a non-empty list of {{role, content}} strings")
    if messages[-1]["role"] != "assistant" or len(messages) < 2:
        raise DataError(f"{where}: a chat's last message must be the assistant's, after at least one other")
    prompt = render(messages[:-1], add_generation_prompt=True)
    whole = render(messages, add_generation_prompt=False)
    completion = whole[len(prompt):] if whole.startswith(prompt) else messages[-1]["content"]
    return prompt, completion


def read_record(record: object, where: str, tokenizer: object) -> Record:
    """A JSON value as a text document, a (prompt, completion) pair or a preference; a DataError naming `where`
    otherwise."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: a record must be a JSON object, got {type(record).__name__} (expected {SCHEMAS})")
    schema = _schema(record, where)
    if schema == "preference":
        return read_preference(record, where)
    if schema == "text":
        return _strings(record, ("text",), where)[0]
    if schema == "messages":
        prompt, completion = _chat(tokenizer, record["messages"], where)
    elif schema == "prompt/completion":
        prompt, completion = _strings(record, ("prompt", "completion"), where)
    else:
        instruction, output = _strings(record, ("instruction", "output"), where)
        extra = _strings(record, ("input",), where)[0] if record.get("input") is not None else ""
        prompt, completion = (f"{instruction}\n\n{extra}" if extra else instruction), output
    if not prompt:
        raise DataError(f"{where}: the prompt is empty (the completion's first token needs one to follow)")
    return prompt, completion


def json_lines(raw: str, path: object) -> Iterator[tuple[object, str, int]]:
    """Each non-blank line's JSON value, its `file:line` and its 1-based number; a line that is not JSON is a
    DataError."""
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            yield json.loads(line), where, number
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not a JSON line ({exc.msg}, column {exc.colno})") from None


def jsonl_records(raw: str, path: object, tokenizer: object) -> Iterator[tuple[Record, int]]:
    """Each non-blank line's record and its 1-based line number; a line that is not JSON is a DataError."""
    for record, where, number in json_lines(raw, path):
        yield read_record(record, where, tokenizer), number
