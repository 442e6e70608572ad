"""Authentication by bearer token and the RBAC authorizer, over the Roles and bindings stored in the emulator.

Tokens: the kubeconfig's `emulated-token` is `kubernetes-admin` in `system:masters` (allowed
everything, as on a real cluster); `mint_token` gives a ServiceAccount token (user
`system:serviceaccount:<ns>:<name>`, groups `system:serviceaccounts`, `system:serviceaccounts:<ns>`,
`system:authenticated`), valid while the ServiceAccount exists. Unknown tokens are 401.

Authorization follows the RBAC authorizer: ClusterRoleBindings grant their ClusterRole everywhere,
RoleBindings grant their Role or ClusterRole in their namespace; a rule matches on apiGroups, verbs,
resources (`plural`, `plural/subresource`, `*`, `*/subresource`) and resourceNames (never for
list, watch, create or deletecollection). A real cluster also binds its default ClusterRoles
(`system:basic-user`, `system:discovery`, ...) to `system:authenticated`; here non-resource reads
(discovery, /openapi, /version) are open to every authenticated user and nothing else is implied.
Aggregated ClusterRoles (`aggregationRule`) and impersonation are not supported.
"""

from __future__ import annotations

import contextvars
import dataclasses
import secrets
from typing import TYPE_CHECKING, Any

from . import errors
from .paths import RequestInfo
from .registry import ResourceType

if TYPE_CHECKING:
    from .server import GeofedEmulator

ADMIN_TOKEN = "emulated-token"
AGENT: contextvars.ContextVar[str] = contextvars.ContextVar("agent", default="")  # the request's User-Agent


@dataclasses.dataclass(frozen=True)
class Check:
    """One authorization decision: a request's own, or one an admission plugin asked for."""

    agent: str
    user: str
    verb: str
    group: str
    resource: str  # plural or plural/subresource
    namespace: str | None
    name: str | None
    allowed: bool


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]
    service_account: tuple[str, str] | None = None  # (namespace, name)

    @property
    def admin(self) -> bool:
        return "system:masters" in self.groups


ADMIN = User("kubernetes-admin", ("system:masters", "system:authenticated"))


class Authenticator:
    def __init__(self, server: GeofedEmulator) -> None:
        self.server = server
        self.tokens: dict[str, User] = {ADMIN_TOKEN: ADMIN}

    def mint(self, namespace: str, name: str) -> str:
        token = "sa-" + secrets.token_hex(16)
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated")
        self.tokens[token] = User(f"system:serviceaccount:{namespace}:{name}", groups, (namespace, name))
        return token

    def authenticate(self, header: str | None) -> User:
        if not header:
            return ADMIN  # the test harness's own requests (see the server's docstring)
        scheme, _, token = header.partition(" ")
        user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is not None and user.service_account is not None:
            sa_type = self.server.registry.get("", "v1", "serviceaccounts")
            ns, name = user.service_account
            if sa_type is None or self.server.get_object(sa_type, ns, name) is None:
                user = None  # the token's ServiceAccount is gone
        if user is None:
            raise errors.status_error(401, "Unauthorized", "Unauthorized")
        return user


def _subject_matches(subject: dict[str, Any], user: User, binding_ns: str | None) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user.name
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount" and user.service_account is not None:
        return (subject.get("namespace") or binding_ns, subject.get("name")) == user.service_account
    return False


def _rule_matches(rule: dict[str, Any], verb: str, group: str, resource: str, name: str | None) -> bool:
    if not ({"*", verb} & set(rule.get("verbs") or [])):
        return False
    if not ({"*", group} & set(rule.get("apiGroups") or [])):
        return False
    plural, _, sub = resource.partition("/")
    wanted = {"*", resource} | ({f"*/{sub}", f"{plural}/*"} if sub else set())
    if not (wanted & set(rule.get("resources") or [])):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)


def _rules_for(server: GeofedEmulator, user: User, namespace: str | None) -> list[dict[str, Any]]:
    reg = server.registry
    kinds = {k: reg.get("rbac.authorization.k8s.io", "v1", k) for k in
             ("roles", "rolebindings", "clusterroles", "clusterrolebindings")}  # fmt: skip
    if any(t is None for t in kinds.values()):
        return []
    cluster_roles = {o["metadata"]["name"]: o for o in server.list_objects(kinds["clusterroles"])}
    rules: list[dict[str, Any]] = []
    for binding in server.list_objects(kinds["clusterrolebindings"]):
        if any(_subject_matches(s, user, None) for s in binding.get("subjects") or []):
            role = cluster_roles.get(binding.get("roleRef", {}).get("name"))
            rules += (role or {}).get("rules") or []
    if namespace:
        roles = {o["metadata"]["name"]: o for o in server.list_objects(kinds["roles"], namespace)}
        for binding in server.list_objects(kinds["rolebindings"], namespace):
            if any(_subject_matches(s, user, namespace) for s in binding.get("subjects") or []):
                ref = binding.get("roleRef") or {}
                role = (cluster_roles if ref.get("kind") == "ClusterRole" else roles).get(ref.get("name"))
                rules += (role or {}).get("rules") or []
    return rules


def allowed(
    server: GeofedEmulator, user: User, verb: str, group: str, resource: str, namespace: str | None, name: str | None
) -> bool:
    """Whether RBAC lets `user` do `verb` on `resource` (`plural` or `plural/sub`) of `group` there."""
    if verb in ("list", "watch", "create", "deletecollection"):
        name = None
    decision = user.admin or any(
        _rule_matches(r, verb, group, resource, name) for r in _rules_for(server, user, namespace)
    )
    server.checks.append(Check(AGENT.get(), user.name, verb, group, resource, namespace, name, decision))
    return decision


def denial(user: User, verb: str, group: str, resource: str, namespace: str | None) -> str:
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'User "{user.name}" cannot {verb} resource "{resource}" in API group "{group}" {where}'


def authorize(server: GeofedEmulator, user: User, info: RequestInfo, rtype: ResourceType) -> None:
    """403 Forbidden with the API server's message unless RBAC allows the request."""
    resource = rtype.plural + (f"/{info.subresource}" if info.subresource else "")
    namespace = info.namespace if (rtype.namespaced or rtype.plural == "namespaces") else None
    if allowed(server, user, info.verb, rtype.group, resource, namespace, info.name):
        return
    why = denial(user, info.verb, rtype.group, resource, namespace)
    raise errors.forbidden(rtype.plural, rtype.group, info.name, why)
