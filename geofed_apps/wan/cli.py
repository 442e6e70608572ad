"""`geofed wan`: run one emulated WAN link in front of a TCP service (the PS) until Ctrl-C.

Point a client at the listen port instead of the PS to train over a slow, jittery or breaking link
(paper §I) on a machine without kernel netem. pydantic and asyncio are imported only when used.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geofed_apps.wan.profile import LinkProfile, Outage
    from geofed_apps.wan.proxy import WanProxy


def add_commands(subparsers: Any) -> None:
    """Register `geofed wan` on the top-level CLI (see `geofed_apps.cli`)."""
    parser = subparsers.add_parser(
        "wan",
        help="emulate a WAN link (latency, jitter, up/down caps, outages) in front of a TCP service",
        description="Forward --listen to --target through an emulated WAN link until Ctrl-C. "
        "Flags override the fields of --profile.",
    )
    parser.add_argument(
        "--target", required=True, type=_host_port, metavar="HOST:PORT", help="the real service"
    )
    parser.add_argument(
        "--listen", type=_port, default=0, metavar="PORT", help="local port (0 = pick a free one)"
    )
    parser.add_argument("--listen-host", default="127.0.0.1", metavar="HOST", help="local address to bind")
    parser.add_argument(
        "--profile",
        type=_link_profile,
        metavar="SHORTHAND",
        help="link as 'LAT[/JITTER[/RATE | /UP/DOWN]][,kind@at[+dur]...]', "
        "e.g. '50ms/10ms/20MBps/40MBps,reset@30s'",
    )
    parser.add_argument("--latency-ms", type=float, metavar="MS", help="one-way delay in milliseconds")
    parser.add_argument(
        "--jitter-ms", type=float, metavar="MS", help="± uniform delay variation in milliseconds"
    )
    parser.add_argument(
        "--up", type=_rate, metavar="RATE", help="client→service cap, e.g. 20MBps, 100Mbps, 0"
    )
    parser.add_argument("--down", type=_rate, metavar="RATE", help="service→client cap, e.g. 40MBps, 0")
    parser.add_argument(
        "--outage",
        type=_outage,
        action="append",
        default=[],
        metavar="SPEC",
        help="add a scripted outage: reset@30s, reset@30s+5s, blackhole@60s+10s (repeatable)",
    )
    parser.add_argument("--seed", type=int, help="seed of the jitter random stream")
    parser.add_argument(
        "--stats-every",
        type=float,
        default=0.0,
        metavar="S",
        help="print traffic counters every S seconds (0 = off)",
    )
    parser.set_defaults(func=_run)


def profile_from_args(args: argparse.Namespace) -> LinkProfile:
    """The `LinkProfile` the flags describe: --profile (or a clean link), then each given flag on top."""
    from geofed_apps.wan.profile import LinkProfile

    base = args.profile or LinkProfile()
    overrides = {
        name: value
        for name, value in (
            ("latency_ms", args.latency_ms),
            ("jitter_ms", args.jitter_ms),
            ("up_bytes_per_s", args.up),
            ("down_bytes_per_s", args.down),
            ("seed", args.seed),
        )
        if value is not None
    }
    if args.outage:
        overrides["outages"] = (*base.outages, *args.outage)
    return LinkProfile.model_validate({**base.model_dump(), **overrides})


def serve(proxy: WanProxy, stop: threading.Event, *, stats_every_s: float = 0.0) -> None:
    """Run `proxy` until `stop` is set, printing its counters every `stats_every_s` seconds if > 0."""
    proxy.start()
    print(f"geofed wan: {proxy.listen_host}:{proxy.port} -> {proxy.target[0]}:{proxy.target[1]}", flush=True)
    print(f"geofed wan: link {proxy.profile.shorthand()}", flush=True)
    try:
        while not stop.wait(stats_every_s if stats_every_s > 0 else 0.5):
            if stats_every_s > 0:
                print(f"geofed wan: {proxy.stats}", flush=True)
    finally:
        proxy.stop()
        print(f"geofed wan: stopped, {proxy.stats}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m geofed_apps.wan.cli --target ...`) for machines without the full CLI."""
    parser = argparse.ArgumentParser(prog="geofed-wan")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["wan", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from geofed_apps.wan.proxy import WanProxy

    try:
        profile = profile_from_args(args)
    except ValidationError as exc:
        print(f"geofed wan: invalid link settings:\n{exc}", file=sys.stderr)
        return 2
    proxy = WanProxy(*args.target, profile, listen_host=args.listen_host, listen_port=args.listen)
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C, or a pod being stopped
            signal.signal(signum, lambda *_: stop.set())
    try:
        serve(proxy, stop, stats_every_s=args.stats_every)
    except OSError as exc:
        print(f"geofed wan: cannot listen on {args.listen_host}:{args.listen}: {exc}", file=sys.stderr)
        return 1
    return 0


# argparse `type=` converters: parse errors become clean usage errors, and the parsers load lazily.


def _link_profile(text: str) -> LinkProfile:
    from geofed_apps.wan.profile import LinkProfile

    return _as_argument_error(LinkProfile.parse, text)


def _rate(text: str) -> int:
    from geofed_apps.wan.profile import parse_rate

    return _as_argument_error(parse_rate, text)


def _outage(text: str) -> Outage:
    from geofed_apps.wan.profile import parse_outage

    return _as_argument_error(parse_outage, text)


def _as_argument_error(parse: Any, text: str) -> Any:
    try:
        return parse(text)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError too
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port {text!r} is not an integer") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")  # [::1]:50051
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"target {text!r} must be HOST:PORT, e.g. 127.0.0.1:50051")
    number = _port(port)
    if number == 0:
        raise argparse.ArgumentTypeError(f"target {text!r} needs a real port, not 0")
    return host, number


if __name__ == "__main__":
    sys.exit(main())
