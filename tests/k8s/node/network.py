"""The node's cluster network: kube-proxy for Services, cluster DNS as /etc/hosts, the API server over TLS.

Every Service gets a ClusterIP from the node's 127.N.0.0/16 (loopback, so nothing leaves the
machine; N is the first free one from a random start, so clusters on one machine do not collide) and this
proxy listens on `<clusterIP>:<port>` and on each `status.loadBalancer.ingress` IP (the load balancer
a test plays), forwarding each connection to a ready endpoint the kubelet names (the first matching
pod: no load balancing). Pods resolve `<svc>.<ns>.svc[.cluster.local]` and `<svc>.<ns>` through
entries the runtime writes into their /etc/hosts, rewritten whenever Services change.
`kubernetes.default.svc` is the API server: the emulator serves plain HTTP, so `ApiBridge` terminates
TLS on 127.N.0.1:443 with a certificate from a CA generated here (the `ca.crt` of every pod's
ServiceAccount mount) and forwards the bytes. A real cluster allocates ClusterIPs from its service
CIDR, serves DNS from CoreDNS (with search domains, so a bare `<svc>` resolves too) and its API
server speaks TLS itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geofed_operator.tls import issue_self_signed

Endpoint = Callable[[str, str, int], tuple[str, int] | None]  # (namespace, service, port) -> (host, port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _splice(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, host: str, port: int) -> None:
    try:
        up_r, up_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))


class ApiBridge:
    """TLS in front of the emulator's plain HTTP, for pods using in-cluster config."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.prefix = ""  # "127.N", once started
        self.ip = ""
        self.tls = issue_self_signed(["kubernetes.default.svc"])
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen on 127.N.0.1:443 for the first N free from a random start."""
        first = random.randrange(64, 250)
        for n in [*range(first, 250), *range(64, first)]:
            ip = f"127.{n}.0.1"
            names = ["kubernetes.default.svc", "kubernetes", "kubernetes.default",
                     "kubernetes.default.svc.cluster.local", ip]  # fmt: skip
            tls = issue_self_signed(names)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
                cert.write_bytes(tls.cert_pem)
                key.write_bytes(tls.key_pem)
                context.load_cert_chain(cert, key)
            try:
                self._server = await asyncio.start_server(
                    lambda r, w: _splice(r, w, *self.upstream), ip, 443, ssl=context
                )
            except OSError:
                continue
            self.tls, self.ip, self.prefix = tls, ip, f"127.{n}"
            return
        raise RuntimeError("no free 127.N.0.1:443 for the API server's TLS front")

    async def stop(self) -> None:
        if self._server:
            self._server.close()


class ServiceProxy:
    """ClusterIPs, load balancer IPs and the DNS names of the emulator's Services, forwarded to endpoints."""

    def __init__(self, endpoint: Endpoint, prefix: str, api_ip: str) -> None:
        self.endpoint, self.prefix, self.api_ip = endpoint, prefix, api_ip
        self.cluster_ips: dict[tuple[str, str], str] = {}
        self._listeners: dict[tuple[str, int], asyncio.Server] = {}
        self._next = 2

    def _ip(self, ns: str, name: str) -> str:
        if (ns, name) not in self.cluster_ips:
            self.cluster_ips[ns, name] = f"{self.prefix}.{self._next // 250}.{self._next % 250 + 2}"
            self._next += 1
        return self.cluster_ips[ns, name]

    def hosts(self) -> dict[str, str]:
        """/etc/hosts entries: every Service's DNS names, and the API server's."""
        out = {f"kubernetes.default.svc{suffix}": self.api_ip for suffix in ("", ".cluster.local")}
        for (ns, name), ip in sorted(self.cluster_ips.items()):
            for suffix in ("", ".svc", ".svc.cluster.local"):
                out[f"{name}.{ns}{suffix}"] = ip
        return out

    async def sync(self, services: list[dict[str, Any]]) -> bool:
        """Listen for every Service port; True when the DNS names changed."""
        before = dict(self.cluster_ips)
        wanted: dict[tuple[str, int], tuple[str, str, int]] = {}
        live = set()
        for svc in services:
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            live.add((ns, name))
            ips = [self._ip(ns, name)]
            ips += [
                i["ip"]
                for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
                if i.get("ip")
            ]
            for port in svc["spec"].get("ports") or []:
                for ip in ips:
                    wanted[ip, int(port["port"])] = (ns, name, int(port["port"]))
        for key in [k for k in self.cluster_ips if k not in live]:
            del self.cluster_ips[key]
        for key in [k for k in self._listeners if k not in wanted]:
            self._listeners.pop(key).close()
        for (ip, port), target in wanted.items():
            if (ip, port) not in self._listeners:
                try:
                    self._listeners[ip, port] = await asyncio.start_server(
                        lambda r, w, t=target: self._forward(r, w, t), ip, port
                    )
                except OSError as exc:
                    print(f"kube-proxy: cannot listen on {ip}:{port}: {exc}", file=sys.stderr)
        return before != self.cluster_ips

    async def _forward(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: tuple[str, str, int]
    ) -> None:
        endpoint = self.endpoint(*target)
        if endpoint is None:  # no ready endpoint: the connection is refused
            writer.close()
            return
        await _splice(reader, writer, *endpoint)

    async def stop(self) -> None:
        for server in self._listeners.values():
            server.close()
        self._listeners.clear()
