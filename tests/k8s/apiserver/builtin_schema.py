"""Built-in kinds checked against their OpenAPI schema (kubernetes-validate's 1.32 definitions).

Unknown fields are pruned and reported, JSON types checked (a mismatch is a decoding error), and the
`required` fields and enums the types' hand-written validation enforces are checked; defaults and the
rest of that validation (immutable fields, port ranges, name uniqueness, ...) are not applied.
"""

from __future__ import annotations

from typing import Any

from . import errors, k8s_schemas
from .errors import FieldError
from .jsontypes import GO_TYPES, is_type, json_type

# The `required` fields the built-in types' hand-written validation enforces (the OpenAPI `required` lists
# say more: a decoded object gets zero values for missing fields, which most validation accepts).
ENFORCED_REQUIRED = {
    "io.k8s.api.core.v1.Container": ["name", "image"],
    "io.k8s.api.core.v1.PodSpec": ["containers"],
    "io.k8s.api.core.v1.EnvVar": ["name"],
    "io.k8s.api.core.v1.Volume": ["name"],
    "io.k8s.api.core.v1.VolumeMount": ["name", "mountPath"],
    "io.k8s.api.core.v1.KeyToPath": ["key", "path"],
    "io.k8s.api.core.v1.ContainerPort": ["containerPort"],
    "io.k8s.api.core.v1.ServicePort": ["port"],
    "io.k8s.api.core.v1.ObjectReference": [],
    "io.k8s.api.apps.v1.DeploymentSpec": ["selector", "template"],
    "io.k8s.api.batch.v1.JobSpec": ["template"],
    "io.k8s.api.rbac.v1.PolicyRule": ["verbs"],
    "io.k8s.api.rbac.v1.RoleRef": ["apiGroup", "kind", "name"],
    "io.k8s.api.rbac.v1.Subject": ["kind", "name"],
    "io.k8s.api.rbac.v1.RoleBinding": ["roleRef"],
    "io.k8s.api.rbac.v1.ClusterRoleBinding": ["roleRef"],
}


class BuiltinWalker:
    """Prunes unknown fields and checks JSON types, enforced `required` fields and `enum` of a built-in type."""

    def __init__(self, root: str = "") -> None:
        self.root = root  # the definition name of the node walked first (its `required` apply there)
        self.unknown: list[str] = []
        self.type_errors: list[str] = []
        self.errors: list[FieldError] = []

    @staticmethod
    def _types(node: dict[str, Any]) -> list[str]:
        kind = node.get("type")
        if isinstance(kind, list):
            return [k for k in kind if k != "null"]
        if kind:
            return [kind]
        alternatives = [k8s_schemas.resolve(n) for n in node.get("oneOf") or []]
        return [t for alt in alternatives for t in BuiltinWalker._types(alt)]

    def walk(self, node: dict[str, Any], value: Any, path: str) -> Any:
        name = node.get("$ref", "").rsplit("/", 1)[-1] if isinstance(node, dict) else ""
        node = k8s_schemas.resolve(node)
        types = self._types(node)
        if value is None:
            return None
        if types and not any(is_type(value, t) for t in types):
            self.type_errors.append(
                f"json: cannot unmarshal {json_type(value)} into Go struct field {path or '.'} "
                f"of type {GO_TYPES.get(types[0], types[0])}"
            )
            return value
        if isinstance(value, dict):
            props = node.get("properties")
            extra = node.get("additionalProperties")
            if props is None and extra is None:
                return value  # free-form (RawExtension, JSON)
            out = {}
            for key, item in value.items():
                sub = f"{path}.{key}" if path else key
                if props and key in props:
                    out[key] = self.walk(props[key], item, sub)
                elif isinstance(extra, dict):
                    out[key] = self.walk(extra, item, f"{path}[{key}]")
                elif extra is True:
                    out[key] = item
                else:
                    self.unknown.append(sub)
            for key in ENFORCED_REQUIRED.get(name or (self.root if not path else ""), []):
                if key not in out or out[key] in ("", None, []):
                    self.errors.append(FieldError(f"{path}.{key}" if path else key, "Required"))
            return out
        if isinstance(value, list):
            items = node.get("items")
            return [self.walk(items, v, f"{path}[{i}]") if isinstance(items, dict) else v for i, v in enumerate(value)]
        if "enum" in node and value not in node["enum"]:
            supported = ", ".join(errors.go_value(v) for v in node["enum"] if v is not None)
            self.errors.append(FieldError(path, "NotSupported", f"supported values: {supported}", value))
        return value
