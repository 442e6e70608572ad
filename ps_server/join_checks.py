"""What a joining client declares about its build, checked against the federation before its token is spent.

A client declares the paradigm settings it built its model under (JSON) and the sha256 of the part it
built but never exchanges (`frozen_digest`: the frozen base, fixed projections). Settings are compared
field by field and every difference is named with both values; the digest is compared with the one the
first joined client declared under the federation's current model and paradigm settings (`frozen_key`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re

from pydantic import ValidationError

from geofed.config import FederationConfig, ModelConfig
from geofed.tokenizer_identity import tokenizer_sha256

from .errors import ParadigmMismatch

log = logging.getLogger("geofed.ps")

_DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_TOKENIZER_NAME = 4096  # model.tokenizer's longest value


def frozen_key(fed: FederationConfig) -> str:
    """Which federation settings a frozen digest belongs to: the model's and the paradigm's."""
    settings = {"model": fed.model.model_dump(mode="json"), "paradigm": fed.paradigm.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def check_frozen_digest(digest: str) -> None:
    """Refuse a declared digest that is not a sha256 hex string."""
    if digest and not _DIGEST.fullmatch(digest):
        raise ParadigmMismatch(f"frozen_digest must be a lower-case sha256 hex string, not {digest[:80]!r}")


def settings_difference(declared_json: str, fed: FederationConfig) -> str | None:
    """None when the declared paradigm settings are the federation's, else every differing setting named
    with the client's and the federation's value."""
    if not declared_json:
        return None
    try:
        declared = json.loads(declared_json)
    except ValueError as exc:
        raise ParadigmMismatch(f"the client's paradigm settings are not JSON: {exc}") from None
    if not isinstance(declared, dict):
        raise ParadigmMismatch("the client's paradigm settings must be a JSON object")
    ours = fed.paradigm
    if declared.get("name") != ours.name:
        return f"paradigm.name: {declared.get('name')!r} here, {ours.name!r} in the federation"
    try:
        theirs = type(ours).model_validate(declared).model_dump(mode="json")
    except ValidationError as exc:
        raise ParadigmMismatch(f"the client's paradigm settings are not valid: {exc}") from None
    mine = ours.model_dump(mode="json")
    differing = [
        f"paradigm.{key}: {json.dumps(theirs.get(key))} here, {json.dumps(mine.get(key))} in the federation"
        for key in sorted(set(mine) | set(theirs))
        if theirs.get(key) != mine.get(key)
    ]
    return "; ".join(differing) or None


def check_tokenizer_declaration(sha256: str, name: str) -> None:
    """Refuse a declared tokenizer identity that is not a sha256 hex string, or a name past any path's length."""
    if sha256 and not _DIGEST.fullmatch(sha256):
        raise ParadigmMismatch(f"tokenizer_sha256 must be a lower-case sha256 hex string, not {sha256[:80]!r}")
    if len(name) > MAX_TOKENIZER_NAME:
        raise ParadigmMismatch(f"the tokenizer's name is {len(name)} characters, more than {MAX_TOKENIZER_NAME}")


def settings_tokenizer(model: ModelConfig) -> tuple[str, str] | None:
    """The federation's tokenizer (name, sha256) as its settings fix it: `model.tokenizer_sha256` when pinned,
    else the identity of `model.tokenizer` when it was stated and this machine can read it; None otherwise
    (then the master client's declared tokenizer is the federation's)."""
    if model.tokenizer_sha256:
        return model.tokenizer, model.tokenizer_sha256
    if "tokenizer" not in model.model_fields_set:
        return None
    try:
        digest = tokenizer_sha256(model.tokenizer)
    except (OSError, ImportError, ValueError) as exc:
        log.info("event=tokenizer_unread tokenizer=%r reason=%r", model.tokenizer, str(exc))
        return None
    return model.tokenizer, digest
