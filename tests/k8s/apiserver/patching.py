"""Patch types the API server accepts: JSON patch, merge patch, strategic merge patch, and apply.

Strategic merge patch follows the built-in types' `x-kubernetes-patch-strategy` and
`x-kubernetes-patch-merge-key` and the `$patch`, `$retainKeys`, `$setElementOrder/` and
`$deleteFromPrimitiveList/` directives kubectl sends. Apply (`application/apply-patch+yaml`) merges
the applied configuration into the live object and removes what the same field manager applied
before and no longer applies, which is what server-side apply does for a single manager; it keeps no
per-field ownership between managers, so it reports no conflicts with other managers' fields.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from . import k8s_schemas

Schema = dict[str, Any] | None


def merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(original: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return jsonpatch.apply_patch(original, ops, in_place=False)


def _strategy(schema: Schema) -> tuple[set[str], str | None]:
    node = k8s_schemas.resolve(schema)
    return set((node.get("x-kubernetes-patch-strategy") or "").split(",")), node.get("x-kubernetes-patch-merge-key")


def _clean(value: Any) -> Any:
    """A patch value with its directives removed (what is stored when nothing is there to merge into)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def _merge_list(original: list[Any], patch: list[Any], key: str | None, item_schema: Schema) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_clean(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    result = copy.deepcopy(original)
    if key is None:  # a merged list of scalars: the union
        return result + [p for p in patch if p not in result]
    for item in patch:
        if not isinstance(item, dict):
            continue
        index = next((i for i, o in enumerate(result) if isinstance(o, dict) and o.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_clean(item))
        else:
            result[index] = strategic_merge_patch(result[index], item, item_schema)
    return result


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def position(item: Any) -> int:
        probe = item.get(key) if key and isinstance(item, dict) else item
        wanted = [o.get(key) if key and isinstance(o, dict) else o for o in order]
        return wanted.index(probe) if probe in wanted else len(wanted)

    return sorted(items, key=position)


def strategic_merge_patch(original: Any, patch: Any, schema: Schema) -> Any:
    """Strategic merge patch of `original` by `patch`, `schema` being the type's OpenAPI node."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return _clean(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif key.startswith("$") or key.startswith("$setElementOrder/"):
            continue
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value, k8s_schemas.child(schema, key))
        elif isinstance(value, list):
            sub = k8s_schemas.child(schema, key)
            strategy, merge_key = _strategy(sub)
            if "merge" in strategy:
                merged = _merge_list(result.get(key) or [], value, merge_key, k8s_schemas.items(sub))
            else:
                merged = _clean(value)
            order = patch.get(f"$setElementOrder/{key}")
            result[key] = _reorder(merged, order, merge_key) if order else merged
        else:
            result[key] = value
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def three_way(last: Any, new: Any, schema: Schema, strategic: bool) -> Any:
    """The patch that turns what was last applied into `new`: `new` plus deletions of what it dropped."""
    if not isinstance(new, dict) or not isinstance(last, dict):
        return copy.deepcopy(new)
    patch = copy.deepcopy(new)
    for key, old in last.items():
        if key not in new:
            patch[key] = None
        elif isinstance(old, dict) and isinstance(new[key], dict):
            patch[key] = three_way(old, new[key], k8s_schemas.child(schema, key) if strategic else None, strategic)
        elif strategic and isinstance(old, list) and isinstance(new[key], list):
            sub = k8s_schemas.child(schema, key)
            strategy, merge_key = _strategy(sub)
            if "merge" in strategy and merge_key:
                kept = {i.get(merge_key) for i in new[key] if isinstance(i, dict)}
                gone = [{"$patch": "delete", merge_key: i.get(merge_key)} for i in old
                        if isinstance(i, dict) and i.get(merge_key) not in kept]  # fmt: skip
                patch[key] = [three_way(_same(old, i, merge_key), i, k8s_schemas.items(sub), True) for i in new[key]]
                patch[key] += gone
            elif "merge" in strategy:
                dropped = [v for v in old if v not in new[key]]
                if dropped:
                    patch[f"$deleteFromPrimitiveList/{key}"] = dropped
    return patch


def _same(items: list[Any], item: Any, key: str) -> Any:
    if not isinstance(item, dict):
        return None
    return next((o for o in items if isinstance(o, dict) and o.get(key) == item.get(key)), None)
