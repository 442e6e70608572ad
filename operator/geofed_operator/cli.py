"""`geofed operator` (run the kopf operator) and `geofed site enroll|revoke` (issue or revoke site access).

Heavy imports (kopf, grpc) stay inside the handlers so `geofed --help` stays fast.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any

ENROLL_HEADER = """\
# geofed site enrollment for site {site!r} of federation {federation!r}; client id {client_id!r}.
# Apply at the site, in a namespace the geofed chart (role site or both) watches:
#   kubectl apply -n <namespace> -f {output}
# Edit spec.data (the training data PVC), gpusPerPod and resources first if needed.
# The Secret holds a credential: send this file over a private channel.
"""
MAX_CLIENT_IDS = 4096  # the upper limit of server.max_client_ids_per_site
MASTER_NOTE = """\
# This client bootstraps the global model: the Federation must name it, in its spec:
#   server:
#     masterClientID: {client_id}
"""


def add_commands(subparsers: Any) -> None:
    """Register `geofed operator` and `geofed site` on the top-level CLI (see `geofed_apps.cli`)."""
    _add_operator(subparsers)
    site = subparsers.add_parser("site", help="enroll or revoke an institution's site")
    site_sub = site.add_subparsers(dest="site_command", required=True)
    _add_enroll(site_sub)
    _add_revoke(site_sub)


def _add_operator(subparsers: Any) -> None:
    """`geofed operator`: run the kopf operator, standalone or as one of several peered replicas."""
    op = subparsers.add_parser(
        "operator",
        help="run the Kubernetes operator (Federations in the cloud, SiteClients at a site)",
        description="Run the geofed kopf operator: standalone (one replica) or, with --peering, several replicas "
        "of which one serves at a time.",
    )
    op.add_argument("--role", choices=("cloud", "site", "both"), default="both", help="which resources to serve")
    scope = op.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], help="namespace to watch (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    op.add_argument("--settings", help="operator settings YAML (camelCase; the chart mounts one)")
    op.add_argument("--liveness", default=None, help="serve a liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    op.add_argument(
        "--peering",
        metavar="NAME",
        help="kopf peering object shared by the replicas (a random priority each: one serves, the others wait); "
        "unset: standalone, run one replica",
    )
    op.add_argument("--verbose", action="store_true", help="debug logging")
    op.set_defaults(func=run_operator)


def _add_enroll(site_sub: Any) -> None:
    """`geofed site enroll`: mint a site credential and write the site's Secret and SiteClient."""
    enroll = site_sub.add_parser(
        "enroll",
        help="issue a site credential and print the Secret + SiteClient YAML for that site",
        description="Mint a revocable site credential (stored hashed by the PS) and write site.yaml.",
    )
    enroll.add_argument("--site", required=True, help="site name (a DNS label), e.g. uw-madison")
    enroll.add_argument("--federation", required=True, help="the Federation's name")
    enroll.add_argument("--ps-address", required=True, help="host:port the site's clients dial (public address)")
    enroll.add_argument("--admin-address", help="host:port of the PS admin API from here (default: --ps-address)")
    enroll.add_argument("--admin-token-file", required=True, help="file with the admin credential")
    enroll.add_argument("--ca", help="PEM CA of the PS certificate (copied into the site's Secret)")
    enroll.add_argument("--insecure", action="store_true", help="plaintext gRPC (local testing only)")
    enroll.add_argument("--server-name", help="TLS name to verify when --admin-address is not a certificate name")
    enroll.add_argument("--namespace", help="namespace at the site (default: none; kubectl apply -n chooses)")
    enroll.add_argument("--name", help="SiteClient name (default: <site>-client)")
    enroll.add_argument("--data-pvc", default="geofed-data", help="PVC with the site's training data")
    enroll.add_argument(
        "--work-pvc",
        default=None,
        help="PVC for the client's work dir (checkpoints, optimizer state), so a relaunched client resumes from "
        "its own step; without it the work dir is an emptyDir and a relaunch starts from the global model",
    )
    enroll.add_argument("--gpus", type=int, default=1, help="GPUs per client pod")
    enroll.add_argument(
        "--master",
        action="store_true",
        help="this site's client bootstraps the global model (the Federation's spec.server.masterClientID)",
    )
    enroll.add_argument("--image-pull-secret", action="append", default=[], help="pull secret at the site")
    enroll.add_argument(
        "--group",
        help="the site's PS group (multi-PS federations); --ps-address and --admin-address are that group's PS",
    )
    enroll.add_argument(
        "--rotate",
        action="store_true",
        help="re-enrol a site that already has a credential: the old one stops working",
    )
    enroll.add_argument(
        "--max-client-ids",
        type=client_id_quota,
        default=0,
        metavar="N",
        help="client ids (<site>.<name>) the site's credential may mint tokens for, 1 to 4096 (default: the "
        "Federation's spec.server.maxClientIdsPerSite); every id of a site shares its one-delta-per-round quota "
        "and its norm bound, so more ids buy a site no influence, only parallel clients",
    )
    enroll.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the PS (default: 10)")
    enroll.add_argument("-o", "--output", help="write here instead of stdout")
    enroll.set_defaults(func=run_enroll)


def _add_revoke(site_sub: Any) -> None:
    """`geofed site revoke`: the site's credential and its tokens stop working."""
    revoke = site_sub.add_parser("revoke", help="revoke a site: its credential and its tokens stop working")
    revoke.add_argument("--site", required=True)
    revoke.add_argument("--admin-address", required=True, help="host:port of the PS admin API")
    revoke.add_argument("--admin-token-file", required=True, help="file with the admin credential")
    revoke.add_argument("--ca", help="PEM CA of the PS certificate")
    revoke.add_argument("--insecure", action="store_true", help="plaintext gRPC (local testing only)")
    revoke.add_argument("--server-name", help="TLS name to verify")
    revoke.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the PS (default: 10)")
    revoke.set_defaults(func=run_revoke)


def client_id_quota(text: str) -> int:
    """--max-client-ids: an integer from 1 to 4096 (the range of server.max_client_ids_per_site)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of client ids, got {text!r}") from None
    if not 1 <= value <= MAX_CLIENT_IDS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_CLIENT_IDS} client ids, got {value}")
    return value


def run_operator(args: argparse.Namespace) -> int:
    """Run kopf until SIGTERM/SIGINT."""
    import logging

    import kopf

    from geofed_operator.handlers import build_registry
    from geofed_operator.handlers.deps import Deps
    from geofed_operator.settings import load_settings

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        settings = load_settings(args.settings)
    except (OSError, ValueError) as exc:
        print(f"geofed operator: bad settings: {exc}", file=sys.stderr)
        return 2
    registry = build_registry(args.role, Deps(settings=settings))
    kopf.run(
        registry=registry,
        standalone=not args.peering,
        peering_name=args.peering,
        # Equal priorities would freeze every replica; distinct random ones elect one to serve, and a
        # standby takes over once the serving one's peering record expires.
        priority=secrets.randbelow(1_000_000) + 1 if args.peering else None,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )
    return 0


def _admin(args: argparse.Namespace, address: str) -> Any:
    from geofed.protocol.admin_client import AdminClient

    credential = Path(args.admin_token_file).read_text().strip()
    ca = Path(args.ca).read_bytes() if args.ca else None
    return AdminClient(
        address, credential, insecure=args.insecure, ca_cert=ca, server_name=args.server_name, timeout_s=args.timeout
    )


def run_enroll(args: argparse.Namespace) -> int:
    """Mint the site credential and write the site's manifests."""
    from geofed.protocol.admin_client import AdminError
    from geofed_operator.enrollment import build_site_manifests, client_id_of, render

    ca = Path(args.ca).read_bytes() if args.ca else None
    try:
        with _admin(args, args.admin_address or args.ps_address) as admin:
            known = sorted(c["client_id"] for c in admin.list_clients() if c.get("site") == args.site)
            if known and not args.rotate:
                print(
                    f"geofed site enroll: site {args.site!r} is already enrolled (the PS knows {', '.join(known)}); "
                    "enrolling again rotates its credential and its running clients cannot relaunch until the new "
                    "site.yaml is applied there. Pass --rotate to do so.",
                    file=sys.stderr,
                )
                return 1
            credential = admin.create_site_credential(args.site, rotate=args.rotate, max_client_ids=args.max_client_ids)
        docs = build_site_manifests(
            site=args.site,
            federation=args.federation,
            ps_address=args.ps_address,
            credential=credential,
            ca_pem=ca,
            insecure=args.insecure,
            namespace=args.namespace,
            name=args.name,
            data_pvc=args.data_pvc,
            work_pvc=args.work_pvc,
            gpus_per_pod=args.gpus,
            master=args.master,
            group=args.group,
            image_pull_secrets=tuple(args.image_pull_secret),
        )
    except (AdminError, OSError, ValueError) as exc:
        print(f"geofed site enroll: {exc}", file=sys.stderr)
        return 1
    client_id = client_id_of(docs)
    header = ENROLL_HEADER.format(
        site=args.site, federation=args.federation, output=args.output or "site.yaml", client_id=client_id
    )
    if args.master:
        header += MASTER_NOTE.format(client_id=client_id)
        print(f"set spec.server.masterClientID: {client_id} in the Federation", file=sys.stderr)
    text = render(docs, header)
    if args.output:
        Path(args.output).write_text(text)
        Path(args.output).chmod(0o600)
        print(f"wrote {args.output} (Secret + SiteClient for site {args.site!r})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    """Revoke a site's credential at the PS."""
    from geofed.protocol.admin_client import AdminError

    try:
        with _admin(args, args.admin_address) as admin:
            revoked = admin.revoke_site(args.site)
    except (AdminError, OSError) as exc:
        print(f"geofed site revoke: {exc}", file=sys.stderr)
        return 1
    print(f"site {args.site!r} {'revoked' if revoked else 'was not enrolled'}")
    return 0 if revoked else 1
