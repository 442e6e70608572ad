"""Federations the operator accepts but must not serve as asked (the real operator against the emulator).

The CA and the admin credential are never replaced unasked, and a name no child can carry is reported.

A deleted `<fed>-ca` Secret while `<fed>-tls` still serves is reported, not regenerated (a new CA would
make every site fail as TLSUntrusted at the next re-issue); a deleted `<fed>-admin` Secret gets a new
credential and the PS rolls to read it, so the Secret and the PS never disagree.
"""

from __future__ import annotations

import asyncio

import pytest

from geofed_operator import names

from .conftest import NAMESPACE, operator_running, rolled_out_until, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, names_of, patch
from .test_operator_federation_children import FED, _condition, _hash, _runner, _started, _status

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]


def _data(api: GeofedEmulator, name: str) -> dict:
    return (get(api, "v1/secrets", NAMESPACE, name) or {}).get("data") or {}


async def test_a_deleted_ca_secret_is_degraded_and_no_new_ca_is_minted(api, fake_ps) -> None:
    """CA Secret gone: Degraded CASecretMissing; a re-issue (new dnsName) waits; restoring the CA resumes it."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _started(api)
        ca = await wait_for(lambda: _data(api, "demo-ca"), what="the CA Secret")
        trusted = _data(api, "demo-tls")["ca.crt"]
        assert trusted == ca["ca.crt"] and ca["ca.key"]
        backup = get(api, "v1/secrets", NAMESPACE, "demo-ca")

        await delete(api, "v1", "Secret", NAMESPACE, "demo-ca")
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "CASecretMissing", what="CASecretMissing")
        message = _condition(api, "Degraded")["message"]
        assert "'demo-ca'" in message and "'demo-tls'" in message, message
        # A change that needs a re-issue must not mint a new CA meanwhile.
        await patch(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo",
                    {"spec": {"tls": {"dnsNames": ["ps.example.org"]}}})  # fmt: skip
        await asyncio.sleep(1.5)  # several timer passes
        assert get(api, "v1/secrets", NAMESPACE, "demo-ca") is None, "an empty or new CA must not appear"
        assert _data(api, "demo-tls")["ca.crt"] == trusted, "the certificate sites trust must not change"
        assert _status(api)["phase"] == "Degraded"

        # Restored from a backup: the certificate is re-issued under the same CA that sites trust.
        restored = {k: backup[k] for k in ("apiVersion", "kind", "type", "data")}
        await create(api, restored | {"metadata": {"name": "demo-ca", "namespace": NAMESPACE}})
        await wait_for(lambda: "ps.example.org" in _tls_names(api), what="re-issued with the new name")
        assert _data(api, "demo-tls")["ca.crt"] == trusted and _data(api, "demo-ca")["ca.key"] == ca["ca.key"]
        await rolled_out_until(api, {"demo-ps"}, lambda: _condition(api, "Degraded").get("status") == "False",
                               "Degraded cleared once the PS serves again")  # fmt: skip
    assert runner.exception is None


def _tls_names(api: GeofedEmulator) -> str:
    secret = get(api, "v1/secrets", NAMESPACE, "demo-tls") or {}
    return ((secret.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_TLS_NAMES, "")


async def test_a_ca_secret_without_its_key_is_degraded_too(api, fake_ps) -> None:
    """A CA Secret emptied of ca.key cannot sign: the same Degraded reason, nothing re-minted."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _started(api)
        ca = await wait_for(lambda: _data(api, "demo-ca"), what="the CA Secret")
        await patch(api, "v1", "Secret", NAMESPACE, "demo-ca", {"data": {"ca.key": None}})
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "CASecretMissing", what="CASecretMissing")
        await asyncio.sleep(1.0)
        assert _data(api, "demo-ca") == {"ca.crt": ca["ca.crt"]} and _data(api, "demo-tls")["ca.crt"] == ca["ca.crt"]
    assert runner.exception is None


async def test_a_deleted_admin_secret_rolls_the_ps_to_its_new_credential(api, fake_ps) -> None:
    """The PS reads the admin credential at start: a regenerated one must change the PS's config hash."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _started(api)
        old = await wait_for(lambda: _data(api, "demo-admin").get("credential"), what="the admin credential")
        old_hash = await wait_for(lambda: _hash(api), what="hash")
        await delete(api, "v1", "Secret", NAMESPACE, "demo-admin")
        new = await wait_for(
            lambda: (c := _data(api, "demo-admin").get("credential")) and c != old and c, what="a new credential"
        )
        assert new != old
        await wait_for(lambda: _hash(api) != old_hash, what="the PS rolled to read the new credential")
    assert runner.exception is None


async def test_a_name_too_long_for_labels_is_refused_and_creates_nothing(api, fake_ps) -> None:
    """A 64-character Federation name cannot label its children: the API server refuses it (the CRD's CEL
    rule), and one stored before that rule existed gets no Deployment or Secret from the operator."""
    long_name = "f" * 64
    body = {**FED, "metadata": {"name": long_name, "namespace": NAMESPACE}}
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"federations"})
        async with api.post(f"/apis/geofed.io/v1alpha1/namespaces/{NAMESPACE}/federations", json=body) as resp:
            assert resp.status == 422 and "at most 63 characters" in await resp.text()
        api.seed(body)  # as if it predated the rule: a real API server then refuses even its status writes
        await asyncio.sleep(1.5)  # several passes
        assert not names_of(api, "apps/v1/deployments", NAMESPACE) and not names_of(api, "v1/secrets", NAMESPACE)
    assert runner.exception is None
