"""Write one benchmark's section of docs/benchmarks.md between its own markers, leaving the rest alone."""

from __future__ import annotations

from pathlib import Path


def replace_section_text(text: str, name: str, body: str) -> str:
    """`text` with the block between `<!-- name:begin -->` and `<!-- name:end -->` set to `body`.

    The block is appended when the markers are absent; everything outside them is left as it was.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    if (begin in text) != (end in text) or text.count(begin) > 1:
        raise ValueError(f"docs markers for {name!r} are unbalanced or repeated; fix them by hand")
    if begin in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    return text.rstrip() + "\n\n" + block + "\n"


def replace_section(path: Path, name: str, body: str) -> None:
    """Rewrite `path` with the `name` section set to `body` (the file is created if missing)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    path.write_text(replace_section_text(text, name, body))
