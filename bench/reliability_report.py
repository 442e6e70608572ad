"""Run every reliability scenario and write `docs/reliability.md` (issue 5, item 5).

    .venv/bin/python bench/reliability_report.py [--load-clients 64] [--load-seconds 30] [--out docs/reliability.md]

The fault scenarios are the very functions the test suite runs (`geofed_testing.reliability`: the
`*_faults` modules and `reseed`); the load run is `geofed_testing.reliability.load.run_load`; hostile
input, security defaults, robust aggregation and the short load tests are run as their pytest files
and reported per test.
Exit status 1 if anything failed.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # geofed_testing is not installed: it runs from the checkout

from geofed_testing.procs import Reaper  # noqa: E402
from geofed_testing.reliability.client_faults import SCENARIOS as CLIENT_FAULTS  # noqa: E402
from geofed_testing.reliability.link_faults import SCENARIOS as LINK_FAULTS  # noqa: E402
from geofed_testing.reliability.load import LoadResult, run_load  # noqa: E402
from geofed_testing.reliability.ps_faults import SCENARIOS as PS_FAULTS  # noqa: E402
from geofed_testing.reliability.ps_faults import ps_killed_mid_push  # noqa: E402
from geofed_testing.reliability.reseed import SCENARIOS as RESEED  # noqa: E402
from geofed_testing.reliability.scenario import ScenarioFailed, ScenarioResult  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CHECK_FILES = (
    "test_rel_hostile.py",
    "test_rel_security.py",
    "test_rel_robust.py",
    "test_rel_attacks.py",
    "test_rel_credentials.py",
    "test_rel_load.py",
    "test_rel_sybil.py",
    "test_rel_outer.py",
    "test_rel_starvation.py",
    "test_rel_logs.py",
)
ATTACK_SUMMARY = ROOT / "bench" / "results" / "attack" / "summary.md"  # written by bench/attack_bench.py


def _outage(workdir: Path, reaper: Reaper) -> ScenarioResult:
    return ps_killed_mid_push(workdir, reaper, downtime_s=27.0, n_clients=1, rounds=3)


SCENARIOS: dict[str, Callable[[Path, Reaper], ScenarioResult]] = {
    **CLIENT_FAULTS,
    **LINK_FAULTS,
    **PS_FAULTS,
    "ps_outage_27s": _outage,
    **RESEED,
}


@dataclass
class Row:
    """A scenario's result, or how it failed."""

    key: str
    result: ScenarioResult | None
    error: str = ""  # first failed check (with its evidence) or the exception

    @property
    def passed(self) -> bool:
        return not self.error


def run_scenario(key: str, fn: Callable[[Path, Reaper], ScenarioResult]) -> Row:
    print(f"== {key}", flush=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"geofed-rel-{key}-") as tmp, Reaper() as reaper:
        try:
            row = Row(key, fn(Path(tmp), reaper))
        except ScenarioFailed as exc:
            row = Row(key, exc.result, exc.result.failed if exc.result else str(exc))
        except Exception as exc:  # an infrastructure failure is reported, not hidden
            row = Row(key, None, f"{type(exc).__name__}: {exc}")
            traceback.print_exc()
    print(f"   {'PASS' if row.passed else 'FAIL'} in {time.monotonic() - t0:.0f} s {row.error[:300]}", flush=True)
    return row


def run_checks(files: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(test, outcome, message) for every test in `files`, run by pytest in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        pytest = Path(sys.executable).with_name("pytest")
        cmd = [
            str(pytest),
            *[f"tests/reliability/{f}" for f in files],
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            f"--junitxml={xml}",
        ]
        print("== " + " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=False)
        if not xml.exists():
            return [("pytest", "error", "pytest wrote no report")]
        out = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome, message = tag, (el.get("message") or "").splitlines()[0][:400]
            out.append((f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}", outcome, message))
        return out


# The hostile-site section: its tables and raw benchmark lines are markdown, kept beside this script.
HOSTILE_CLIENTS = (ROOT / "bench" / "reliability_hostile.md").read_text()

ATTACK_COMMAND = "    .venv/bin/python bench/attack_bench.py --seeds 0,1,2 --rounds 3"
ATTACK_BENCH_SETUP = (
    "Closed loop against a real `geofed ps` with default settings but the outer optimizer (FedAvg η = 0.5, "
    "Nesterov η = 0.5 with μ = 0.9, Adam η = 0.01). Three honest sites train the default model (GPT-2 2 × 128) "
    "with their real AdamW, H = 40, each from the model the PS published last, read back over the wire, on their "
    "own module split of the Python standard library; a fourth site trains too and pushes, once per round after "
    "the honest three, 10 δ (scaled), −δ (sign_flip), noise of 10 × δ's RMS, 10 δ through 4 client ids one after "
    "the other (sybil), 3 × 0.95 ‖δ‖ along one fixed direction (drift) or 3 × its previous push's norm "
    "(ratchet). The control is the same seed without the fourth site. Distances are in the control's mean "
    "per-version step (what one honest site's update moves the model). Cells: median (range) over the seeds "
    "run; the runs shared the machine with other work (load averages in each run's JSON). Raw output: "
    "`bench/results/attack/`."
)

NOTES = """## Known limits not expressed as a failing test

- **Exactly-once needs the client's checkpoint.** The PS applies each upload id at most once; a client
  writes its round (data position, encoded upload and its id) to `latest.pt` *before* sending, so a client
  killed mid-push resends the same upload after its relaunch and is answered DUPLICATE if it had landed
  (`tests/e2e/test_client_relaunch.py`). A client whose checkpoint disk fails before the push still redoes
  that round from the previous checkpoint.
- **A plain SIGKILL does not cut a push.** The killed process's kernel still flushes what it had written, so
  on a fast or buffered link the PS often receives the whole push. The mid-push and mid-stream scenarios
  therefore also reset the client's link (a preempted host loses its in-flight bytes).
- **A push cut by the client's death is invisible.** `ps_server/grpc_api.py` `PushDelta` handles only
  `PushRejected`; a cancelled request stream raises `grpc.RpcError` from the request iterator, so neither
  `receiver.abort()`, the `event=push_rejected` log line nor `geofed_rejected_pushes` sees it.
- **With two sites, a site sending tiny deltas shrinks the other's bound.** Each site's limit is 3 × the other
  sites' entries, so with two sites a hostile one pushing near-zero deltas holds the honest one to 3 × that:
  no displacement, but slower honest progress. From three sites on the median of the others is honest.
- **A drift still lands in part.** The displacement budget is over a sliding window of 16 deltas: a site
  pushing maximal deltas in one direction still moves the model by about 4 of them per 16 of its pushes.
- **A PS restart empties the displacement windows.** The sketches (256 kB a site) stay in memory so that the
  checkpoint written with every version stays O(model + sites); after a restart a site may drift one more
  budget's worth before its window fills again.
- **The zeroth-order first bound is loose.** Zeroth-order scalars have no optimizer step to derive a tight
  start from; the federation's first scalars are bounded by √seeds · ln(vocab) / ε (about 800 × an honest
  round of the default model), later ones by 3 × the other sites' entries.
- **A sharded PS budgets less.** The sharded front bounds each delta per site like one PS, but it has no
  sketch of the delta (the shards hold its values), so the displacement budget does not apply there, and the
  outer bounds run per shard on its own slice.
- **An attack inside the bound still lands.** A sign-flipped or redirected delta no longer than 3 × the median
  honest norm is applied like an honest one (the benchmark above measures what that costs); the robust
  options reduce it, at their own cost on honest progress.
- **Asynchronous K > 1 and a buffered delta.** A client whose delta was ACCEPTED but not yet applied must
  wait for a newer version before its next push (one delta per client per base version and round); the
  agent (`client_agent/connection/model_waits.py` `next_model`) still trains again on the same version, is refused
  ALREADY_EXISTS and handles that like STALE (resync, retrain): that round's work is wasted. K = 1 (the
  default) and sync mode are unaffected.
- **A dropped round does not roll back the outer optimizer.** The check before publishing runs on the
  combined update (before Nesterov/Adam see it) and on the next model; the bounds make the second check
  unreachable, but if it ever fires, the optimizer state has already taken the step.
- **TLS/mTLS refusals look like an unreachable PS to the client** (`JoinError: ... UNAVAILABLE`), not like a
  certificate problem.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _lost(row: Row) -> str:
    r = row.result
    if r is None:
        return "not measured"
    if r.lost or r.twice:
        return ", ".join(
            s
            for s in (
                f"{r.lost} acknowledged delta(s) lost" if r.lost else "",
                f"{r.twice} applied twice" if r.twice else "",
            )
            if s
        )
    audited = row.passed or "residual" in r.details or "coefficients" in r.details
    return "none" if audited else "not audited (failed before the ledger check)"


def _provenance(command: str, started: str, seconds: float) -> list[str]:
    """The report's title, its command and what it ran: machine, commit, uncommitted changes, duration."""
    commit = (
        subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        or "unknown"
    )
    # Tracked files changed from the commit (this report itself aside, rewritten on every run): the code it ran.
    changed = [
        line[3:]
        for line in subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.splitlines()
        if line[3:] != "docs/reliability.md"
    ]
    tree = f"plus uncommitted changes to {len(changed)} file(s)" if changed else "no uncommitted changes"
    return [
        "# Reliability and security report",
        "",
        "Generated by one command (issue 5); rerun it to refresh this file:",
        "",
        f"    {command}",
        "",
        f"Run {started} on {platform.node()} ({os.cpu_count()} CPU cores, Python {platform.python_version()}, "
        f"commit {commit}, {tree}), {seconds / 60:.1f} min. Every process ran on 127.0.0.1; "
        "WAN faults go through the user-space emulator `geofed_apps.wan.WanProxy`.",
        "",
        "How each fault scenario is judged: numpy clients push fp32 deltas that are distinct random vectors "
        "named by (client, round, base version), under FedAvg with η = 1, uniform weights, no staleness "
        "discount and K = 1, so θ_v = θ_0 + Σ applied δ. Least squares of (model − θ_0) over every delta a "
        "scenario *tried* to send must give coefficients of exactly 0 or 1 (residual < 1e-4): 1 for every "
        "delta the PS acknowledged (else it was lost), never 2 (applied twice), and the version must be "
        "1 + the number applied. This recomputation uses nothing from the PS but its model bytes.",
        "",
        "## Fault scenarios",
        "",
        "| Scenario | What was injected | Outcome | Time to resume | Data lost | Result |",
        "|---|---|---|---|---|---|",
    ]


def _scenario_lines(rows: list[Row]) -> list[str]:
    lines: list[str] = []
    for row in rows:
        r = row.result
        name, injected = (r.name, r.injected) if r else (row.key, "")
        outcome = r.outcome if r and row.passed else f"**{row.error}**"
        resume = f"{r.resume_s:.1f} s" if r and r.resume_s is not None else "—"
        lines.append(
            f"| {_cell(name)} | {_cell(injected)} | {_cell(outcome)} | {resume} | {_lost(row)} | "
            f"{'pass' if row.passed else '**FAIL**'} |"
        )
    lines += [
        "",
        "Time to resume: from the fault (kill or reset) to the next acknowledged push or complete model; "
        "for the full disk (where the PS never stopped serving), from space returning to the next durable "
        "checkpoint; for the total loss, from the new PS listening to the re-seeded model installed.",
        "",
    ]
    return lines


def _load_lines(load: LoadResult) -> list[str]:
    return [
        "## Load",
        "",
        f"{load.clients} concurrent clients, each with its own gRPC connection, pushing a {load.numel}-parameter "
        f"delta as {load.codec} ({load.payload_bytes / 1e3:.1f} kB per push) at one PS for {load.seconds:.0f} s "
        "(async FedAvg, K = 1, a checkpoint after every version as by default).",
        "",
        "| Sustained pushes/s | p50 latency | p99 latency | PS RSS start / peak / end | Pushes | "
        "Lost | Double-counted | Model exact | PS counts match |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {load.pushes_per_s:.1f} | {load.p50_ms:.0f} ms | {load.p99_ms:.0f} ms | {load.rss_start_mb:.0f} / "
        f"{load.rss_peak_mb:.0f} / {load.rss_end_mb:.0f} MB | {load.pushes} | {load.lost} | "
        f"{load.double_counted} | {'yes' if load.exact else '**no**'} | {'yes' if load.ledger_ok else '**no**'} |",
        "",
        "Audit: each client's delta holds multiples of 2^-10, so the final model must equal Σ receipts · "
        "decoded δ bit for bit, and the version 1 + the receipts."
        + (f" Errors: {'; '.join(load.errors[:5])}" if load.errors else ""),
        "",
    ]


def _check_lines(checks: list[tuple[str, str, str]]) -> list[str]:
    lines = [
        "## Hostile input, security defaults, robust aggregation, short load tests",
        "",
        "| Test | Result | Failure |",
        "|---|---|---|",
    ]
    lines += [
        f"| `{_cell(t)}` | {'pass' if o == 'passed' else '**' + o.upper() + '**'} | {_cell(m)} |"
        for t, o, m in checks
    ]
    lines += [
        "",
        f"The two fuzz tests run {os.environ.get('GEOFED_FUZZ_EXAMPLES', '300')} hypothesis examples "
        "each (derandomised); an honest client pushes throughout and the last test checks that the model "
        "is θ_0 plus exactly its deltas. The long load run is `pytest -m slow tests/reliability` or "
        "`bench/load_bench.py --clients 128 --seconds 120`.",
        "",
    ]
    return lines


def render(
    command: str,
    rows: list[Row],
    load: LoadResult | None,
    checks: list[tuple[str, str, str]],
    started: str,
    seconds: float,
) -> str:
    lines = _provenance(command, started, seconds) + _scenario_lines(rows)
    if load is not None:
        lines += _load_lines(load)
    if checks:
        lines += _check_lines(checks)
    lines += [HOSTILE_CLIENTS]
    if ATTACK_SUMMARY.is_file():
        summary = ATTACK_SUMMARY.read_text()
        lines += ["### Attack benchmark", "", ATTACK_COMMAND, "", ATTACK_BENCH_SETUP, "", summary, ""]
    lines += [NOTES]
    failed = [r for r in rows if not r.passed] + [c for c in checks if c[1] != "passed"]
    lines += [
        "## Summary",
        "",
        "Every scenario passed."
        if not failed
        else f"{len(failed)} scenario(s)/test(s) failed; each failure above names the file and function at fault.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "reliability.md"))
    p.add_argument("--load-clients", type=int, default=64)
    p.add_argument("--load-seconds", type=float, default=30.0)
    p.add_argument("--only", help="comma-separated scenario keys (default: all); " + ", ".join(SCENARIOS))
    p.add_argument("--no-checks", action="store_true", help="skip the hostile/security/robust pytest files")
    p.add_argument("--no-load", action="store_true", help="skip the load run")
    args = p.parse_args(argv)
    keys = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = [k for k in keys if k not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join([".venv/bin/python", "bench/reliability_report.py", *given])
    started, t0 = time.strftime("%Y-%m-%d %H:%M %Z"), time.monotonic()
    rows = [run_scenario(k, SCENARIOS[k]) for k in keys]
    load = None
    if not args.no_load:
        print(f"== load: {args.load_clients} clients x {args.load_seconds:.0f} s", flush=True)
        with tempfile.TemporaryDirectory(prefix="geofed-rel-load-") as tmp, Reaper() as reaper:
            load = run_load(Path(tmp), reaper, clients=args.load_clients, seconds=args.load_seconds)
    checks = [] if args.no_checks else run_checks(CHECK_FILES)
    text = render(command, rows, load, checks, started, time.monotonic() - t0)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    load_ok = load is None or (load.exact and load.ledger_ok and not (load.lost or load.double_counted or load.errors))
    return 0 if all(r.passed for r in rows) and load_ok and all(c[1] == "passed" for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
