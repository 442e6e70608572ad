"""Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) decoded to their JSON form.

Typed client-go clients (helm's release storage) send built-in objects as protobuf: the `k8s\\0`
magic, then a `runtime.Unknown` holding the type and the object's message. This decodes the kinds
such clients send here: Secret, ConfigMap and DeleteOptions (with ObjectMeta and OwnerReferences);
any other kind is a 415, as for a media type the server does not accept. Responses stay JSON, which
those clients also accept.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

MAGIC = b"k8s\x00"


class Unsupported(Exception):
    """A protobuf body of a kind this decoder does not know."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value): an int for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            yield number, data[pos : pos + 8]
            pos += 8
        elif wire == 5:
            yield number, data[pos : pos + 4]
            pos += 4
        else:
            raise Unsupported(f"wire type {wire}")


def _text(value: int | bytes) -> str:
    assert isinstance(value, bytes)
    return value.decode()


def _entry(value: int | bytes, decode: Callable[[bytes], Any]) -> tuple[str, Any]:
    assert isinstance(value, bytes)
    key, item = "", decode(b"")
    for number, part in _fields(value):
        if number == 1:
            key = _text(part)
        elif number == 2:
            assert isinstance(part, bytes)
            item = decode(part)
    return key, item


def _time(value: int | bytes) -> str:
    assert isinstance(value, bytes)
    seconds = next((v for n, v in _fields(value) if n == 1), 0)
    assert isinstance(seconds, int)
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_reference(data: bytes) -> dict[str, Any]:
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion", 6: "controller", 7: "blockOwnerDeletion"}
    ref: dict[str, Any] = {}
    for number, value in _fields(data):
        if number in (6, 7):
            ref[names[number]] = bool(value)
        elif number in names:
            ref[names[number]] = _text(value)
    return ref


def _object_meta(data: bytes) -> dict[str, Any]:
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    meta: dict[str, Any] = {}
    for number, value in _fields(data):
        if number in strings and value:
            meta[strings[number]] = _text(value)
        elif number == 7 and value:
            meta["generation"] = value
        elif number == 8 and value:
            meta["creationTimestamp"] = _time(value)
        elif number in (11, 12):
            key, item = _entry(value, bytes.decode)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = item
        elif number == 13:
            assert isinstance(value, bytes)
            meta.setdefault("ownerReferences", []).append(_owner_reference(value))
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _object(kind: str, data: bytes, maps: dict[int, tuple[str, Callable[[bytes], Any]]],
            scalars: dict[int, str]) -> dict[str, Any]:  # fmt: skip
    """A built-in object: metadata (field 1), map fields, and string or bool scalars."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind}
    for number, value in _fields(data):
        if number == 1:
            assert isinstance(value, bytes)
            obj["metadata"] = _object_meta(value)
        elif number in maps:
            name, decode = maps[number]
            key, item = _entry(value, decode)
            obj.setdefault(name, {})[key] = item
        elif number in scalars:
            obj[scalars[number]] = bool(value) if isinstance(value, int) else _text(value)
    return obj


def _secret(data: bytes) -> dict[str, Any]:
    maps = {2: ("data", _b64), 4: ("stringData", bytes.decode)}
    return _object("Secret", data, maps, {3: "type", 5: "immutable"})


def _config_map(data: bytes) -> dict[str, Any]:
    return _object("ConfigMap", data, {2: ("data", bytes.decode), 3: ("binaryData", _b64)}, {4: "immutable"})


def _delete_options(data: bytes) -> dict[str, Any]:
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    for number, value in _fields(data):
        if number == 1:
            options["gracePeriodSeconds"] = value
        elif number == 2:
            assert isinstance(value, bytes)
            fields = {1: "uid", 2: "resourceVersion"}
            options["preconditions"] = {fields[n]: _text(v) for n, v in _fields(value) if n in fields}
        elif number == 3:
            options["orphanDependents"] = bool(value)
        elif number == 4:
            options["propagationPolicy"] = _text(value)
        elif number == 5:
            options.setdefault("dryRun", []).append(_text(value))
    return options


DECODERS = {"Secret": _secret, "ConfigMap": _config_map, "DeleteOptions": _delete_options}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf request body; Unsupported for kinds not decoded here."""
    if not body.startswith(MAGIC):
        raise Unsupported("no k8s protobuf magic")
    kind, raw = "", b""
    for number, value in _fields(body[len(MAGIC) :]):
        if number == 1:
            assert isinstance(value, bytes)
            kind = next((_text(v) for n, v in _fields(value) if n == 2), "")
        elif number == 2:
            assert isinstance(value, bytes)
            raw = value
    if kind not in DECODERS:
        raise Unsupported(kind)
    return DECODERS[kind](raw)
