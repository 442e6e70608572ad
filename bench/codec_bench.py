"""Benchmark of the delta codecs (paper §III-B3) on a real training delta or a synthetic one.

`--delta FILE.npy`: a real delta saved from a training run (bench/results/codec/ holds one, with a JSON
note of where it came from); `--tile N` repeats it N times so throughput is timed over enough symbols
(the sizes per parameter do not change). Without `--delta`: a SYNTHETIC GPT-2-small-shaped delta, each
tensor Student-t (df=3) noise at its own log-normal scale. Reports bits/param, encode/decode throughput
(MB/s of fp32 input = 4 * numel / seconds; median and range of `--repeat` runs), relative error, and
side by side: zstd level 1 on the same quantised bytes, the symbols' Shannon entropy, Huffman's overhead,
and the entropy stage alone with each Huffman coder present (C, numba, numpy: same bytes; the first present is
the one the codec uses, see geofed/codec/huffman_backend.py).

    python bench/codec_bench.py --delta bench/results/codec/real-delta-local-v14-v15.npy --tile 36 \
        --json bench/results/codec/real-delta.json --write docs/benchmarks.md
    python bench/codec_bench.py --from-json bench/results/codec/real-delta.json --write docs/benchmarks.md
    python bench/codec_bench.py --numel 4000000       # synthetic
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from geofed.codec import decoder_for, huffman_backend, huffman_c, make_codec
from geofed.codec import quantize as qz
from geofed.codec.entropy import build_stage
from geofed.codec.header import Reader

BEGIN, END = "<!-- codec:begin -->", "<!-- codec:end -->"
FRAME = 1 << 20


def gpt2_small_shapes() -> list[tuple[str, int]]:
    """(name, numel) of GPT-2 small's 148 parameter tensors, in state-dict order."""
    d, v, ctx, layers = 768, 50257, 1024, 12
    out = [("wte", v * d), ("wpe", ctx * d)]
    for i in range(layers):
        p = f"h.{i}."
        out += [
            (p + "ln_1.w", d),
            (p + "ln_1.b", d),
            (p + "attn.c_attn.w", d * 3 * d),
            (p + "attn.c_attn.b", 3 * d),
            (p + "attn.c_proj.w", d * d),
            (p + "attn.c_proj.b", d),
            (p + "ln_2.w", d),
            (p + "ln_2.b", d),
            (p + "mlp.c_fc.w", d * 4 * d),
            (p + "mlp.c_fc.b", 4 * d),
            (p + "mlp.c_proj.w", 4 * d * d),
            (p + "mlp.c_proj.b", d),
        ]
    return out + [("ln_f.w", d), ("ln_f.b", d)]


def synthetic_delta(numel: int, seed: int = 0) -> np.ndarray:
    """GPT-2-small-shaped delta scaled to `numel`: per tensor Student-t(3) * (1e-4 * lognormal(0, 0.7))."""
    rng = np.random.default_rng(seed)
    shapes = gpt2_small_shapes()
    total = sum(n for _, n in shapes)
    sizes = np.maximum(1, np.round(np.array([n for _, n in shapes]) * numel / total)).astype(np.int64)
    sizes[0] += numel - sizes.sum()
    out = np.empty(numel, np.float32)
    pos = 0
    for n in sizes:
        scale = 1e-4 * np.exp(rng.normal(0.0, 0.7))
        out[pos : pos + n] = rng.standard_t(3.0, n).astype(np.float32) * np.float32(scale)
        pos += n
    return out


REPEAT = 3
"""Timed runs per figure (median and range reported); `--repeat` changes it."""


def timed(fn: Callable[[], object], repeat: int | None = None) -> tuple[list[float], object]:
    """CPU seconds of this thread per run (the machine is shared: wall time would count other jobs)."""
    times, result = [], None
    for _ in range(repeat or REPEAT):
        t = time.thread_time()
        result = fn()
        times.append(time.thread_time() - t)
    return times, result


def mbps(numel: int, seconds: list[float] | float) -> float:
    """Median throughput over the runs."""
    return 4 * numel / float(np.median(seconds)) / 1e6


def spread(numel: int, seconds: list[float]) -> list[float]:
    """[slowest, fastest] throughput over the runs."""
    return [4 * numel / max(seconds) / 1e6, 4 * numel / max(min(seconds), 1e-12) / 1e6]


def run_codec(x: np.ndarray, spec: tuple) -> dict:
    codec = make_codec(*spec)
    frames: list[bytes] = []

    def encode() -> bytes:
        header, it = codec.encode(x, frame_elems=FRAME)
        frames[:] = list(it)
        return header

    encode()  # warm-up, untimed: numba compiles the Huffman coder on first use
    t_enc, header = timed(encode)
    out = np.empty_like(x)

    def decode() -> None:
        dec = decoder_for(header, max_numel=x.size)
        for f in frames:
            for off, vals in dec.feed(f):
                out[off : off + vals.size] = vals
        dec.finish()

    decode()  # warm-up, untimed
    t_dec, _ = timed(decode)
    nbytes = len(header) + sum(map(len, frames))
    err = rel_error(x, out)
    return {
        "name": codec.name,
        "bpp": 8 * nbytes / x.size,
        "enc": mbps(x.size, t_enc),
        "dec": mbps(x.size, t_dec),
        "enc_range": spread(x.size, t_enc),
        "dec_range": spread(x.size, t_dec),
        "err": err,
    }


def rel_error(x: np.ndarray, y: np.ndarray) -> float:
    """||x - y|| / ||x|| accumulated in float64, chunk by chunk."""
    num = den = 0.0
    for a in range(0, x.size, FRAME):
        xa = x[a : a + FRAME].astype(np.float64)
        num += float(np.square(xa - y[a : a + FRAME]).sum())
        den += float(np.square(xa).sum())
    return (num / den) ** 0.5 if den else 0.0


def global_symbols(x: np.ndarray, bits: int) -> np.ndarray:
    lo, hi = qz.global_range(x)
    mid, _, inv = qz.steps(np.array([lo]), np.array([hi]), bits)
    syms = np.empty(x.size, qz.symbol_dtype(bits))
    return qz.quantize_into(x, mid[0], inv[0], bits, np.empty(x.size, np.float32), syms)


def entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def stage_vs_zstd(x: np.ndarray, bits: int) -> dict:
    """Entropy stages alone vs zstd -1 on the same quantised symbols (global range), all in fp32 MB/s."""
    import zstandard

    syms = global_symbols(x, bits)
    counts = np.bincount(syms, minlength=1 << bits)
    raw = syms.tobytes()
    # every side gets one untimed run first, as the codecs above do: with few runs a cold first one (its input
    # and tables out of cache after the previous step) moved the median, most for the Huffman decode
    z = zstandard.ZstdCompressor(level=1).compress(raw)
    zstandard.ZstdDecompressor().decompress(z)
    t_zc, z = timed(lambda: zstandard.ZstdCompressor(level=1).compress(raw))
    t_zd, _ = timed(lambda: zstandard.ZstdDecompressor().decompress(z))
    row = {
        "bits": bits,
        "H": entropy_bits(counts),
        "zstd_bpp": 8 * len(z) / x.size,
        "zstd_enc": mbps(x.size, t_zc),
        "zstd_dec": mbps(x.size, t_zd),
        "zstd_enc_range": spread(x.size, t_zc),
        "zstd_dec_range": spread(x.size, t_zd),
    }
    for kind in ("huffman", "ans"):
        row[kind] = time_stage(kind, bits, counts, syms)
    row["huffman_coder"] = coder_name()
    for coder in ("numba", "numpy"):  # the fallbacks, for comparison (same bytes)
        if coder in huffman_backend.available():
            with forced_coder(coder):
                row[f"huffman_{coder}"] = time_stage("huffman", bits, counts, syms)
    return row


def coder_name() -> str:
    """The Huffman coder the codec uses here, with the C kernels' build (e.g. `c/bmi2`)."""
    name = huffman_backend.backend()
    return f"c/{huffman_c._ext.isa()}" if name == "c" else name


@contextmanager
def forced_coder(coder: str) -> Iterator[None]:
    saved = os.environ.get("GEOFED_HUFFMAN")
    os.environ["GEOFED_HUFFMAN"] = coder
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("GEOFED_HUFFMAN")
        else:
            os.environ["GEOFED_HUFFMAN"] = saved


def time_stage(kind: str, bits: int, counts: np.ndarray, syms: np.ndarray) -> dict:
    """One entropy stage alone over frames of already-quantised symbols; checks it round-trips."""
    stage = build_stage(kind, bits, counts, FRAME)
    enc = stage.encoder(FRAME)
    enc(syms[:FRAME])  # compile (numba) and warm up outside the timing
    t_e, bodies = timed(lambda: [enc(syms[a : a + FRAME]) for a in range(0, syms.size, FRAME)])

    def dec() -> list[np.ndarray]:
        return [stage.decode(Reader(b, "frame"), min(FRAME, syms.size - i * FRAME)) for i, b in enumerate(bodies)]

    dec()  # warm-up, untimed (see stage_vs_zstd)
    t_d, got = timed(dec)
    assert np.array_equal(np.concatenate(got), syms), f"{kind} stage is not lossless"
    return {
        "bpp": 8 * (sum(map(len, bodies)) + len(stage.params())) / syms.size,
        "enc": mbps(syms.size, t_e),
        "dec": mbps(syms.size, t_d),
        "enc_range": spread(syms.size, t_e),
        "dec_range": spread(syms.size, t_d),
    }


CODECS = (
    [("fp32",), ("bf16",)]
    + [(f"int{b}", e) for b in (8, 16) for e in ("huffman", "ans", "none")]
    + [
        ("int8", "huffman", 65536),
        ("int8", "huffman", 4096),
        ("int8", "ans", 65536),
        ("int16", "huffman", 65536),
    ]
)


def _r(row: dict, key: str) -> str:
    lo, hi = row[f"{key}_range"]
    return f"{row[key]:.0f} [{lo:.0f}–{hi:.0f}]"


def _pair(row: dict | None) -> str:
    return "—" if row is None else f"{row['enc']:.0f} / {row['dec']:.0f}"


def _coder(stages: list[dict]) -> str:
    """The coder named in a run (runs before the C coder recorded none: the numba coder was the default)."""
    return stages[0].get("huffman_coder", "numba") if stages else "?"


def render(source: str, numel: int, rows: list[dict], stages: list[dict], seconds: float, argv: list[str]) -> str:
    cmd = "python bench/codec_bench.py " + " ".join(argv)
    lines = [
        f"Command: `{cmd.strip()}` — {source}; {numel:,} params, frames of {FRAME:,}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs shared with other jobs, numpy {np.__version__}, "
        f"{seconds:.0f} s total. Throughput = MB/s of fp32 input (4·numel / s) per thread CPU second, median "
        f"[slowest–fastest] of {REPEAT} runs; encode includes quantisation. Raw numbers: the `--json` file.",
        "",
        "| codec | bits/param | encode MB/s | decode MB/s | rel. error ‖x−x̂‖/‖x‖ |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['name']} | {r['bpp']:.3f} | {_r(r, 'enc')} | {_r(r, 'dec')} | {r['err']:.2e} |" for r in rows]
    lines += [
        "",
        "Entropy stage alone vs zstd level 1 on the same quantised symbols (global min/max; "
        f"throughput excludes quantisation; Huffman = the coder the codec uses here ({_coder(stages)}); numba and "
        "numpy = the fallbacks, same bytes):",
        "",
        "| symbols | entropy bits/param | Huffman bits/param | Huffman overhead | ANS bits/param | "
        "zstd-1 bits/param | Huffman enc / dec MB/s | numba Huffman enc / dec MB/s | numpy Huffman enc / dec MB/s | "
        "ANS enc / dec MB/s | zstd-1 enc / dec MB/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for st in stages:
        h, a = st["huffman"], st["ans"]
        over = 100 * (h["bpp"] / st["H"] - 1) if st["H"] > 0 else float("nan")
        lines.append(
            f"| int{st['bits']} | {st['H']:.3f} | {h['bpp']:.3f} | {over:+.1f}% | {a['bpp']:.3f} | "
            f"{st['zstd_bpp']:.3f} | {_r(h, 'enc')} / {_r(h, 'dec')} | {_pair(st.get('huffman_numba'))} | "
            f"{_pair(st.get('huffman_numpy'))} | {a['enc']:.0f} / {a['dec']:.0f} | "
            f"{_r(st, 'zstd_enc')} / {_r(st, 'zstd_dec')} |"
        )
    return "\n".join(lines + ["", *verdicts(rows, stages)])


def verdicts(rows: list[dict], stages: list[dict]) -> list[str]:
    """The targets, judged from this run's numbers (so a re-run rewrites them honestly)."""
    by = {r["name"]: r for r in rows}
    out = ["**Targets, judged from the numbers above:**", ""]
    for st in stages:
        h = st["huffman"]
        over = 100 * (h["bpp"] / st["H"] - 1)
        ok = "meets" if over <= 5 else "misses"
        why = (
            " Huffman spends at least 1 bit per symbol, and with one global min/max over heavy tails most "
            "int8 symbols fall into the central bin, so the entropy is below or near 1 bit; ANS "
            f"({st['ans']['bpp']:.3f} bits/param) is the fix there."
            if over > 5
            else ""
        )
        out.append(f"- Huffman within 5% of entropy, int{st['bits']}: {over:+.1f}% — {ok} the target.{why}")
    for st in stages:
        h = st["huffman"]
        enc, dec = h["enc"] / st["zstd_enc"], h["dec"] / st["zstd_dec"]
        verdict = "meets" if min(enc, dec) >= 1.0 else "misses"
        worst = [f"{way} {lo / z:.2f}×" for way, lo, z in (("encode", h["enc_range"][0], st["zstd_enc"]),
                                                           ("decode", h["dec_range"][0], st["zstd_dec"]))]
        fallbacks = "; ".join(
            f"the {c} coder runs at {st[k]['enc'] / st['zstd_enc']:.2f}× / {st[k]['dec'] / st['zstd_dec']:.2f}×"
            for c, k in (("numba", "huffman_numba"), ("numpy", "huffman_numpy")) if k in st
        )
        out.append(
            f"- Speed vs zstd-1 on the same int{st['bits']} symbols (goal ≥ 1.0× both ways, medians): the "
            f"{_coder(stages)} Huffman coder encodes at {enc:.2f}× and decodes at {dec:.2f}× zstd's speed — "
            f"{verdict} the goal (its slowest runs: {', '.join(worst)} of zstd's median); {fallbacks}. "
            f"Output size {h['bpp'] / st['zstd_bpp']:.2f}× zstd-1's."
        )
    if _coder(stages).startswith("c"):
        out.append(
            "- How the C coder works: encode joins 56 // max_len codes before one 64-bit big-endian store; decode "
            "runs six lanes in lock-step, one 8-byte read per lane per 57 // max_len symbols, plus two more from the "
            "same read when every lane has the bits left (short codes: int8), and one 11-bit table lookup per "
            "symbol: for int8 the entry is the symbol and its length (codes over 11 bits, ~1%, take the length from "
            "the entry and the symbol from the canonically sorted symbols); for int16 (codes mostly 14-19 bits) "
            "every entry gives the length in its low 6 bits, used as the shift count as is, and the offset into the "
            "sorted symbols, so each symbol is two lookups and no flag test. A prefix that spans several code "
            "lengths (~0.3% of int16's symbols) takes an out-of-line search of the canonical limits, which keeps "
            "the hot loop's registers free. zstd's literal decoder can always take 5 symbols per read because zstd "
            "caps its codes at 11 bits; this format allows 16 (int8) and 20 (int16) bits."
        )
    g8, b8, g16 = by.get("int8+huffman"), by.get("int8+huffman/b4096"), by.get("int16+huffman")
    if g8 and b8 and g16:
        out.append(
            f"- Per-block vs global ranges: at the same 8-bit width, 4096-element blocks cut the error "
            f"{g8['err'] / b8['err']:.0f}× ({g8['err']:.2e} → {b8['err']:.2e}) but cost "
            f"{b8['bpp'] - g8['bpp']:.1f} more bits/param, because finer steps raise the entropy. At similar "
            f"bits/param, global int16+huffman ({g16['bpp']:.2f} bits, error {g16['err']:.2e}) beats int8 "
            f"with blocks ({b8['bpp']:.2f} bits, error {b8['err']:.2e}) by {b8['err'] / g16['err']:.0f}× in "
            "error: entropy coding makes the empty tail levels of a global range nearly free."
        )
    return out


def write_section(path: Path, body: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the section between `begin` and `end` in `path` (creating file/markers if needed)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    section = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    global REPEAT
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--numel", type=int, default=124_000_000, help="parameters in the synthetic delta")
    ap.add_argument("--delta", type=Path, help="a real delta (.npy, float32) saved from a training run")
    ap.add_argument("--tile", type=int, default=1, help="repeat the delta this many times (timing only)")
    ap.add_argument("--repeat", type=int, default=REPEAT, help="timed runs per figure (median and range)")
    ap.add_argument("--json", type=Path, help="write every number of this run here")
    ap.add_argument("--write", type=Path, help="update the codec section of this markdown file")
    ap.add_argument("--from-json", type=Path, help="render a saved --json run instead of measuring")
    args = ap.parse_args(argv)
    REPEAT = max(1, args.repeat)
    if args.from_json:  # the tables and the verdicts under them, from the saved numbers alone
        saved = json.loads(args.from_json.read_text())
        REPEAT = saved["repeat"]
        body = render(saved["source"], saved["numel"], saved["codecs"], saved["stages"], saved.get("seconds", 0.0),
                      saved["argv"])
        print(body)
        if args.write:
            write_section(args.write, body)
        return 0
    t0 = time.perf_counter()
    if args.delta:
        real = np.load(args.delta).astype(np.float32, copy=False).reshape(-1)
        x = np.tile(real, max(1, args.tile))
        source = (f"REAL delta {args.delta} ({real.size:,} values from a training run"
                  + (f", tiled {args.tile}× for timing" if args.tile > 1 else "") + ")")
    else:
        x = synthetic_delta(args.numel)
        source = "SYNTHETIC GPT-2-small-shaped delta (Student-t df=3 per tensor at log-normal scales)"
    print(f"{source}: {x.size:,} params in {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"Huffman coder in use: {coder_name()} (present: {', '.join(huffman_backend.available())})", flush=True)
    rows = []
    for spec in CODECS:
        rows.append(run_codec(x, spec))
        r = rows[-1]
        print(
            f"{r['name']:22s} {r['bpp']:7.3f} b/p  enc {r['enc']:7.0f}  dec {r['dec']:7.0f} MB/s  err {r['err']:.2e}",
            flush=True,
        )
    stages = [stage_vs_zstd(x, bits) for bits in (8, 16)]
    body = render(source, x.size, rows, stages, time.perf_counter() - t0, argv)
    print(body)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": argv, "source": source, "numel": int(x.size), "repeat": REPEAT,
                                         "seconds": time.perf_counter() - t0,
                                         "platform": platform.platform(), "codecs": rows, "stages": stages},
                                        indent=1))
    if args.write:
        write_section(args.write, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
