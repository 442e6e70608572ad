"""The shell-block extractor the walk-through runs the docs with, and what it finds in the docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from geofed_testing.docs_blocks import commands, shell_blocks

REPO = Path(__file__).resolve().parents[2]
DOC, README = REPO / "docs" / "kubernetes.md", REPO / "README.md"


def test_blocks_markers_and_sections(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "## One\n\n```sh\necho a \\\n  b   # two words\n```\n\n```\nNAME  AGE\n```\n\n"
        "<!-- walkthrough: skip (needs docker) -->\n\n```bash\ndocker push x\n```\n\n"
        "<!-- walkthrough: skip (stale) -->\nprose in between\n```sh\necho c\n```\n## Two\n```shell\necho d\n```\n"
    )
    blocks = shell_blocks(page)
    assert [(b.line, b.heading, b.skip) for b in blocks] == [
        (3, "One", None), (14, "One", "needs docker"), (20, "One", None), (24, "Two", None)
    ]  # fmt: skip
    assert commands(blocks[0].text) == ["echo a b"]
    assert [b.line for b in shell_blocks(page, section="Two")] == [24]


def test_a_marker_before_a_block_that_is_not_shell_is_an_error(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- walkthrough: skip (x) -->\n```yaml\na: 1\n```\n")
    with pytest.raises(ValueError, match="not shell"):
        shell_blocks(page)


def test_the_docs_leave_out_only_what_cannot_run_here() -> None:
    skipped = [commands(b.text)[0].split()[:3] for b in shell_blocks(DOC) if b.skip]
    assert skipped == [
        ["docker", "build", "-f"],  # builds and pushes with Docker
        ["make", "images"],  # CI builds and tests the images before the walk-through
        ["kubectl", "-n", "default"],  # port-forward: the emulated API server has none
        ["geofed", "site", "revoke"],  # would end the walk-through's site
    ]


def test_every_readme_command_is_one_the_walkthrough_runs() -> None:
    """The README's Kubernetes block is a summary of docs/kubernetes.md: the same commands, word for word."""
    (block,) = shell_blocks(README, section="Deploy on Kubernetes")
    ours = {c for b in shell_blocks(DOC) for c in commands(b.text)}
    assert [c for c in commands(block.text) if c not in ours] == []
