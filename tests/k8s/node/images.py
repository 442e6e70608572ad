"""What a container runtime takes from an image's config: user, environment, working directory, entrypoint.

The process runtime has no image to pull, so the test names a Dockerfile per image reference and this
reads the final stage's `USER`, `ENV`, `WORKDIR`, `ENTRYPOINT` and `CMD` from it (the exec forms, as
the repository's Dockerfiles use them). A real runtime reads the built image's config JSON instead,
with `ARG` values and shell-form instructions resolved by the build.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config the kubelet combines with a container spec."""

    user: str = "0"
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)

    def uid(self) -> int | None:
        """The numeric uid the image runs as, or None for a user name (the kubelet cannot check a name)."""
        name = self.user.split(":", 1)[0]
        return int(name) if name.isdigit() else (0 if name == "root" else None)


def _words(value: str) -> list[str]:
    value = value.strip()
    if value.startswith("["):
        return [str(v) for v in json.loads(value)]
    return ["/bin/sh", "-c", value]


def _env_pairs(value: str, env: dict[str, str]) -> dict[str, str]:
    """`ENV A=1 B=$A:x` (later pairs see earlier ones) or the legacy `ENV A 1`."""
    words = shlex.split(value)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    out: dict[str, str] = {}
    for word in words:
        key, _, raw = word.partition("=")
        out[key] = re.sub(r"\$\{?(\w+)\}?", lambda m, seen={**env, **out}: seen.get(m.group(1), ""), raw)
    return out


def from_dockerfile(path: Path) -> ImageConfig:
    """The config the final stage of `path` gives its image (instructions of earlier stages are dropped)."""
    lines = re.sub(r"\\\n", " ", path.read_text()).splitlines()
    user, workdir, env = "0", "/", {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    entrypoint: list[str] = []
    cmd: list[str] = []
    for line in lines:
        words = line.strip().split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        op, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        if op == "FROM":  # a new stage starts from its base's config; ours all start from a plain Python base
            user, workdir, entrypoint, cmd = "0", "/", [], []
            env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        elif op == "USER":
            user = rest.strip()
        elif op == "WORKDIR":
            workdir = rest.strip()
        elif op == "ENV":
            env.update(_env_pairs(rest, env))
        elif op == "ENTRYPOINT":
            entrypoint, cmd = _words(rest), []  # a new ENTRYPOINT resets CMD, as the builder does
        elif op == "CMD":
            cmd = _words(rest)
    return ImageConfig(user=user, env=env, workdir=workdir, entrypoint=entrypoint, cmd=cmd)
