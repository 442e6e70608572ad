"""The shell blocks of a Markdown document, as a reader copies them, for tests that run them verbatim.

A fenced block whose info string is `sh`, `bash`, `shell` or `console`-free shell is a command block;
other fences (output samples, YAML) are not. An HTML comment `<!-- walkthrough: skip (reason) -->` on
the line before a fence (blank lines allowed) marks a block that cannot run where the tests run;
it is returned with its reason so a test can list what it left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL = {"sh", "bash", "shell"}
FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!--\s*walkthrough:\s*skip\s*\((.+)\)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    heading: str  # the nearest `## ` heading above it
    text: str
    skip: str | None  # the reason, for a block marked as not runnable here

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line}"


def shell_blocks(path: Path, *, section: str | None = None) -> list[Block]:
    """Every shell block of `path` (only those under the `## ` heading starting with `section`, if given)."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    heading, skip, i = "", None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            heading = line[3:].strip()
        marker = SKIP.match(line)
        if marker:
            skip = marker.group(1)
        fence = FENCE.match(line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ValueError(f"{path}:{i + 1}: a fence that never closes")
            if fence.group(1) in SHELL and (section is None or heading.startswith(section)):
                blocks.append(Block(path, i + 1, heading, "\n".join(lines[i + 1 : end]) + "\n", skip))
            elif skip is not None and fence.group(1) not in SHELL:
                raise ValueError(f"{path}:{i + 1}: a walkthrough marker before a block that is not shell")
            skip, i = None, end + 1
            continue
        if line.strip() and not marker:
            skip = None  # a marker applies to the next block only when nothing but blank lines follows it
        i += 1
    return blocks


def commands(text: str) -> list[str]:
    """The commands of a block: continuation lines joined, comments and blank lines dropped, spaces squeezed."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.append(re.sub(r"\s+", " ", line))
    return out
