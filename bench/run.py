"""The one entry point of geofed's benchmarks.

python bench/run.py all                                   # the whole federation benchmark (~40 min)
python bench/run.py federation --scenario hetero-wan      # FedAvg, DiLoCo, FedNova, ours, single process
python bench/run.py ratedist --scenario hetero-wan        # the codec rate-distortion runs
python bench/run.py federation --methods ours,fedavg --repeat 2   # a repeat, for the noise
python bench/run.py federation --methods single-global,dp-global   # references (b) and (c): lr sweeps
python bench/run.py federation --cpu-share 0.4            # each client and the PS capped at 0.4 CPU (root)
python bench/run.py report                                # tables + plots from bench/results/
python bench/run.py report --results-dir DIR              # the same from DIR into DIR/report.md
python bench/run.py codec|load|reliability [ARGS...]      # the sibling benchmarks in bench/
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:
    sys.path.insert(0, str(BENCH.parent))  # `python bench/run.py` from anywhere: make `bench.*` importable

SIBLINGS = {"codec": "codec_bench.py", "load": "load_bench.py", "reliability": "reliability_report.py"}


def _methods(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one method, comma-separated")
    return names


def build_parser() -> argparse.ArgumentParser:
    from bench.federation.methods import MAIN_METHODS, METHODS, RATEDIST_METHODS
    from bench.federation.scenarios import BUILTIN

    p = argparse.ArgumentParser(
        prog="bench/run.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, methods, what in (
        ("federation", MAIN_METHODS, "time-to-loss of every method"),
        ("ratedist", RATEDIST_METHODS, "codec rate-distortion runs"),
    ):
        s = sub.add_parser(name, help=what)
        s.add_argument(
            "--scenario",
            default="hetero-wan",
            help=f"built-in ({', '.join(BUILTIN)}) or a YAML file (default hetero-wan)",
        )
        s.add_argument(
            "--methods",
            type=_methods,
            default=list(methods),
            help=f"comma-separated, from: {', '.join(METHODS)} (default {','.join(methods)})",
        )
        s.add_argument(
            "--repeat", type=int, default=1, help="repeat number recorded with the results (default 1)"
        )
        s.add_argument(
            "--work-dir", type=Path, default=Path("runs/bench"), help="run directories (default runs/bench)"
        )
        s.add_argument(
            "--no-report", action="store_true", help="do not rewrite docs/benchmarks.md afterwards"
        )
        s.add_argument(
            "--results-dir",
            type=Path,
            default=None,
            help="save result JSONs under DIR/<scenario>/ instead of bench/results/ (the single-process "
            "baseline's token budget then comes from the runs saved there); implies --no-report",
        )
    a = sub.add_parser("all", help="federation + ratedist + a repeat of ours and FedAvg, then the report")
    a.add_argument("--scenario", default="hetero-wan")
    a.add_argument("--work-dir", type=Path, default=Path("runs/bench"))
    for s in (sub.choices["federation"], sub.choices["ratedist"], a):
        s.add_argument(
            "--cpu-share",
            type=float,
            default=None,
            metavar="CPUS",
            help="cap each client and the PS at CPUS CPUs, each in its own cgroup v1 cpu group, so a waiting "
            "client's core is not lent to the others (needs root; default: they share the cores)",
        )
    r = sub.add_parser("report", help="rebuild the docs sections and plots from bench/results/")
    r.add_argument("--scenario", default=None, help="one scenario (default: every scenario with saved results)")
    r.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="rebuild from result JSONs under DIR/<scenario>/ into DIR/report.md and DIR's plots, leaving "
        "docs/benchmarks.md alone",
    )
    for name, script in SIBLINGS.items():
        s = sub.add_parser(name, help=f"run bench/{script} with the remaining arguments", add_help=False)
        s.add_argument("args", nargs=argparse.REMAINDER)
    return p


def _run_sibling(script: str, args: list[str]) -> int:
    path = BENCH / script
    if not path.is_file():
        print(f"bench/run.py: bench/{script} does not exist (yet)", file=sys.stderr)
        return 2
    sys.argv = [str(path), *args]
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in SIBLINGS:
        return _run_sibling(SIBLINGS[args.command], args.args)

    from bench.federation.cpu_shares import CpuShareError
    from bench.federation.launch import RunError
    from bench.federation.methods import MAIN_METHODS, RATEDIST_METHODS, REPEATED_METHODS
    from bench.federation.report import write_report
    from bench.federation.scenario import ScenarioError, load_scenario
    from bench.federation.suite import run_suite

    try:
        if args.command == "report":
            # One report for every saved scenario, so rebuilding it never drops a section.
            chosen = load_scenario(args.scenario) if args.scenario else None
            if args.results_dir:
                root = args.results_dir.resolve()
                write_report(chosen, results_root=root, doc=root / "report.md", img_dir=root)
            else:
                write_report(chosen)
            return 0
        scenario = load_scenario(args.scenario)
        if args.command in ("federation", "ratedist"):
            if args.repeat < 1:
                raise ScenarioError(f"--repeat must be >= 1, got {args.repeat}")
            roots = {"results_root": args.results_dir.resolve()} if args.results_dir else {}
            run_suite(
                scenario, args.methods, repeat=args.repeat, work_root=args.work_dir, cpu_share=args.cpu_share,
                **roots,
            )  # fmt: skip
            if not args.no_report and not args.results_dir:
                write_report(None)  # every saved scenario: one section per scenario, none dropped
        elif args.command == "all":
            share = {"work_root": args.work_dir, "cpu_share": args.cpu_share}
            run_suite(scenario, MAIN_METHODS, **share)
            run_suite(scenario, [m for m in RATEDIST_METHODS if m not in MAIN_METHODS], **share)
            run_suite(scenario, REPEATED_METHODS, repeat=2, **share)
            write_report(scenario)
    except (ScenarioError, RunError, CpuShareError) as exc:
        print(f"bench/run.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
