/* C kernels of the Huffman lane coder (see huffman_c.py), byte-identical to the numpy coder in huffman_lanes.py.
 *
 * Portable C99 plus the CPython API, no intrinsics; the speed comes from the loop shapes:
 *  - encode: one 64-bit MSB-first accumulator; 2-4 codes go in per flush (as many as fit in 56 bits), and a
 *    flush is a branch-free unaligned 8-byte big-endian store that advances by the whole bytes written;
 *  - decode: six independent lanes at a time (their table lookups overlap), one unaligned 8-byte read per lane
 *    per 2-5 symbols; 8-bit symbols: codes up to PRIM_BITS long come from one table lookup, longer ones from the
 *    same entry (their length when the prefix fixes it) and the symbols sorted in canonical order; 16-bit
 *    symbols: every entry gives the length and a second lookup in the sorted symbols. A prefix that spans
 *    several lengths (rare) takes an out-of-line search of the canonical limits.
 * On x86-64 with gcc/clang the kernels are compiled twice, portable and for BMI2 (register shift counts), and the
 * BMI2 build is picked at import when the CPU has it.
 * Corrupt input cannot read out of bounds: reads near the end of the stream go through a checked path that
 * pads with zeros, and every lane decodes exactly its symbol count (a symbol advances at most max_len bits).
 * A lane that does not end on its stored boundary is reported back, as in numpy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define INLINE static inline __attribute__((always_inline))
#else
#define LIKELY(x) (x)
#define INLINE static inline
#endif

INLINE uint64_t load_be64(const uint8_t *p) {
    /* compilers turn this byte-wise form into one load + bswap (or movbe) */
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
           ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
}

INLINE void store_be64(uint8_t *p, uint64_t v) {
    p[0] = (uint8_t)(v >> 56); p[1] = (uint8_t)(v >> 48); p[2] = (uint8_t)(v >> 40); p[3] = (uint8_t)(v >> 32);
    p[4] = (uint8_t)(v >> 24); p[5] = (uint8_t)(v >> 16); p[6] = (uint8_t)(v >> 8); p[7] = (uint8_t)v;
}

/* ---------------------------------------------------------------- encode */

/* enc[s] = code << 8 | length (0: the symbol has no code). `acc` holds `nb` pending bits at its top. */
#define PUT(sym)                                                                \
    do {                                                                        \
        uint32_t e_ = enc[(sym)], l_ = e_ & 0xFF;                               \
        bad |= l_ - 1;                                                          \
        acc |= (uint64_t)(e_ >> 8) << ((64 - nb - l_) & 63);                    \
        nb += l_;                                                               \
    } while (0)
#define FLUSH()                                                                 \
    do {                                                                        \
        store_be64(w, acc);                                                     \
        w += nb >> 3;                                                           \
        acc <<= (nb & ~7u);                                                     \
        nb &= 7;                                                                \
    } while (0)

/* One frame into `w0` (room for every byte + 8); lane bit counts into `lane_bits`. Returns bits, or -1. */
#define DEFINE_ENCODE(NAME, T, F, ATTR)                                                                       \
    ATTR static int64_t NAME(const T *syms, Py_ssize_t n, Py_ssize_t lane_syms, const uint32_t *enc, uint8_t *w0, \
                        uint32_t *lane_bits) {                                                             \
        uint64_t acc = 0, prev = 0;                                                                        \
        uint32_t nb = 0, bad = 0;                                                                          \
        uint8_t *w = w0;                                                                                   \
        Py_ssize_t lanes = (n + lane_syms - 1) / lane_syms;                                                \
        for (Py_ssize_t lane = 0; lane < lanes; lane++) {                                                  \
            Py_ssize_t i = lane * lane_syms, hi = i + lane_syms < n ? i + lane_syms : n;                   \
            for (; i + (F) <= hi; i += (F)) {                                                              \
                /* join the group's codes first: that chain does not wait on the accumulator's */          \
                uint64_t c = 0;                                                                            \
                uint32_t len = 0;                                                                          \
                _Pragma("GCC unroll 4") for (int k = 0; k < (F); k++) {                                                      \
                    uint32_t e = enc[syms[i + k]], l = e & 0xFF;                                           \
                    bad |= l - 1; /* bit 31 set by a length of 0: the symbol has no code */              \
                    c = (c << l) | (e >> 8);                                                               \
                    len += l;                                                                              \
                }                                                                                          \
                acc |= c << ((64 - nb - len) & 63);                                                        \
                nb += len;                                                                                 \
                FLUSH();                                                                                   \
            }                                                                                              \
            for (; i < hi; i++) {                                                                          \
                PUT(syms[i]);                                                                              \
                FLUSH();                                                                                   \
            }                                                                                              \
            uint64_t now = (uint64_t)(w - w0) * 8 + nb;                                                    \
            lane_bits[lane] = (uint32_t)(now - prev);                                                      \
            prev = now;                                                                                    \
        }                                                                                                  \
        return (bad >> 31) ? -1 : (int64_t)prev;                                                                  \
    }


/* ---------------------------------------------------------------- decode */

typedef struct {
    const uint32_t *prim;  /* 2^prim_bits entries (see huffman_c.py). 8-bit symbols, one of three kinds:
                            *  direct  (bit 31 = 0): sym | len << 16, for codes of at most prim_bits bits;
                            *  known   (bits 31,30 = 1,0): len | (delta[len] + BIAS) << 8, one length in range;
                            *  search  (bits 31,30 = 1,1): shortest length, the rest from `limit`.
                            * 16-bit symbols: len | (delta[len] + BIAS16) << 8 when the prefix fixes the length,
                            * else SEARCH16 | shortest length */
    const uint32_t *limit; /* [max_len + 2]: end of length l's codes, left-aligned to max_len bits; sentinel */
    const int32_t *delta;  /* [max_len + 2]: index into sorted = (v >> (max_len - l)) + delta[l] */
    const void *sorted;    /* symbols in canonical (length, symbol) order */
    int prim_bits, max_len;
    int more; /* try two extra symbols per read (the caller judged the codes short enough to fit often) */
} Tables;

#define PRIM_BITS 11 /* the first table is indexed by the top 11 stream bits, whatever max_len is */
#define KNOWN 0x80000000u
#define SEARCH 0x40000000u
#define BIAS (1 << 21)
#define SEARCH16 0x40u     /* 16-bit symbols' first table: bit 6 marks a search entry */
#define BIAS16 (1 << 23)

/* The 64 stream bits from bit `p` (at least 57 of them whole); past the end reads zeros, never memory. */
INLINE uint64_t peek(const uint8_t *s, size_t nbytes, uint64_t p) {
    size_t b = (size_t)(p >> 3);
    uint64_t v = 0;
    if (LIKELY(b + 8 <= nbytes)) {
        v = load_be64(s + b);
    } else {
        for (int k = 0; k < 8; k++) v = (v << 8) | (b + k < nbytes ? s[b + k] : 0);
    }
    return v << (p & 7);
}

/* The same without the bounds check, for lanes whose every read is known to lie inside the stream. */
INLINE uint64_t peek_in(const uint8_t *s, uint64_t p) { return load_be64(s + (p >> 3)) << (p & 7); }

/* The canonical-limit search from the shortest length `l` the first table allows (its prefix spans lengths);
 * returns sym | len << 16, or 0 when no code matches (the lane then stalls and misses its end). Out of line and
 * cold: rare for both widths, and inlined its tables and loop cost the hot loop registers. */
#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static uint32_t search_len(const Tables *t, uint64_t w, uint32_t l, int width) {
    uint32_t v = (uint32_t)(w >> (64 - t->max_len));
    while (v >= t->limit[l]) l++;
    if (l > (uint32_t)t->max_len) return 0;
    int32_t i = (int32_t)(v >> (t->max_len - l)) + t->delta[l];
    uint32_t sym = width == 1 ? ((const uint8_t *)t->sorted)[i] : ((const uint16_t *)t->sorted)[i];
    return sym | l << 16;
}

#define SEARCH_LEN(T, wv, l_, s_)                                                                 \
    do {                                                                                          \
        uint32_t r_ = search_len(t, wv, l_, (int)sizeof(T));                                      \
        s_ = r_ & 0xFFFF;                                                                         \
        l_ = r_ >> 16;                                                                            \
    } while (0)

/* 8-bit symbols: nearly every code fits the first table (direct entry: sym | len << 16), the rest are rare. */
#define ENTRY8(T, wv, e_, l_, s_)                                                               \
    do {                                                                                        \
        if (LIKELY(!(e_ & KNOWN))) {                                                            \
            l_ = e_ >> 16;                                                                      \
            s_ = e_;                                                                            \
        } else {                                                                                \
            l_ = e_ & 0xFF;                                                                     \
            if (LIKELY(!(e_ & SEARCH))) {                                                       \
                s_ = sorted[(int32_t)((wv) >> (64 - l_)) + (int32_t)((e_ >> 8) & 0x3FFFFF) - BIAS]; \
            } else {                                                                            \
                SEARCH_LEN(T, wv, l_, s_);                                                      \
            }                                                                                   \
        }                                                                                       \
    } while (0)

/* 16-bit symbols: one entry kind for every prefix that fixes the length (direct or not, most of int16's codes
 * are longer than PRIM_BITS): len in bits 0-5, so the shifts take the entry itself as their count (BMI2 shifts
 * use the low 6 bits; (0 - e) & 63 = 64 - len), and delta + BIAS16 in bits 8-31, with no flag to mask off.
 * Measured on the real int16 delta against the 8-bit layout (a flag test, a mask and a bias): 17% faster. */
#define ENTRY16(T, wv, e_, l_, s_)                                                              \
    do {                                                                                        \
        l_ = e_ & 63;                                                                           \
        if (LIKELY(!(e_ & SEARCH16))) {                                                         \
            s_ = sorted[(int64_t)((wv) >> ((0u - e_) & 63)) + (int64_t)(e_ >> 8) - BIAS16];     \
        } else {                                                                                \
            SEARCH_LEN(T, wv, l_, s_);                                                          \
        }                                                                                       \
    } while (0)

/* Decode the symbol at the top of `wv` into `dst`, shift it out of `wv`; its length goes to `lv`. */
#define TOP(T, wv, dst, lv)                                                                     \
    do {                                                                                        \
        uint32_t e_ = prim[(wv) >> (64 - PRIM_BITS)], l_, s_;                                   \
        if (sizeof(T) == 2) ENTRY16(T, wv, e_, l_, s_); else ENTRY8(T, wv, e_, l_, s_);         \
        (dst) = (T)s_;                                                                          \
        (wv) <<= l_;                                                                            \
        (lv) = l_;                                                                              \
    } while (0)

/* One symbol, advancing the lane's position `pv` by its length. */
#define ONE(T, wv, pv, dst)                                                                     \
    do {                                                                                        \
        uint32_t len_;                                                                          \
        TOP(T, wv, dst, len_);                                                                  \
        (pv) += len_;                                                                           \
    } while (0)

/* In the lock-step loop a fresh window keeps its top 57 bits (all stream bits), then a marker 1 and zeros: the
 * bits decoded since the read are ctz(w) - 6, so a lane's position moves once per read, not once per symbol,
 * and the six positions can live in memory without a load and store per symbol. */
#define MARK(w) (((w) & ~(uint64_t)0x7F) | 0x40)
#if defined(__GNUC__)
#define USED(w) ((uint64_t)__builtin_ctzll(w) - 6)
#else
INLINE uint64_t used_bits(uint64_t w) {
    uint64_t n = 0;
    while (!(w & 1)) w >>= 1, n++;
    return n - 6;
}
#define USED(w) used_bits(w)
#endif

/* NL full lanes g..g+NL-1 in lock-step, F (+ 2) symbols per read; READ(p) is peek_in or the checked peek. NL = 6
 * measured best on the real delta (int8 decode vs zstd-1, 4 lanes: 0.76x, 5: 0.93x, 6: 0.98x, 7: 0.88x, 8: 0.83x):
 * enough lookups in flight to hide the table's latency, few enough windows to stay in registers. */
/* Steps of the lock-step loop over windows ww[] and positions pp[] of NL lanes (out of lane q + k * L). */
#define LANES_READ(READ) _Pragma("GCC unroll 8") for (int k = 0; k < NL; k++) ww[k] = MARK(READ(pp[k]))
#define LANES_TOP(T, AT) _Pragma("GCC unroll 8") for (int k = 0; k < NL; k++) TOP(T, ww[k], q[k * L + (AT)], unused_)
#define LANES_ADVANCE() _Pragma("GCC unroll 8") for (int k = 0; k < NL; k++) pp[k] += USED(ww[k])

#define GROUP(T, F, READ)                                                                                   \
    do {                                                                                                    \
        uint64_t pp[NL], ww[NL];                                                                            \
        uint32_t unused_;                                                                                   \
        for (int k = 0; k < NL; k++) pp[k] = starts[g + k];                                                 \
        T *q = out + g * lane_syms;                                                                         \
        const Py_ssize_t L = lane_syms;                                                                     \
        Py_ssize_t j = 0;                                                                                   \
        /* F symbols per read are safe for any codes; when every lane's window still holds 2 * max_len bits \
         * after them (the usual case with short codes), each takes two more from the same read */         \
        const uint64_t more = t->more ? ((uint64_t)1 << (64 - 2 * t->max_len)) - 1 : 0;                    \
        for (; more && j + (F) + 2 <= L;) {                                                                 \
            LANES_READ(READ);                                                                               \
            _Pragma("GCC unroll 4") for (int i = 0; i < (F); i++) LANES_TOP(T, j + i);                      \
            int room = 1; /* the marker still sits in the low 64 - 2 * max_len bits of every window */      \
            _Pragma("GCC unroll 8") for (int k = 0; k < NL; k++) room &= (ww[k] & more) != 0;               \
            if (room) {                                                                                     \
                LANES_TOP(T, j + (F));                                                                      \
                LANES_TOP(T, j + (F) + 1);                                                                  \
                j += 2;                                                                                     \
            }                                                                                               \
            j += (F);                                                                                       \
            LANES_ADVANCE();                                                                                \
        }                                                                                                   \
        for (; j + (F) <= L; j += (F)) {                                                                    \
            LANES_READ(READ);                                                                               \
            _Pragma("GCC unroll 4") for (int i = 0; i < (F); i++) LANES_TOP(T, j + i);                      \
            LANES_ADVANCE();                                                                                \
        }                                                                                                   \
        (void)unused_;                                                                                      \
        for (; j < L; j++) {                                                                                \
            for (int k = 0; k < NL; k++) {                                                                  \
                uint64_t w = READ(pp[k]);                                                                   \
                ONE(T, w, pp[k], q[k * L + j]);                                                             \
            }                                                                                               \
        }                                                                                                   \
        for (int k = 0; k < NL; k++) ends[g + k] = pp[k];                                                   \
    } while (0)

#define NL 6
#define READ_IN(p) peek_in(s, p)
#define READ_CHECKED(p) peek(s, nbytes, p)

/* Every lane: full ones NL at a time (unchecked reads while the group stays inside the stream), then the rest
 * one by one. Lanes [0, full) hold lane_syms symbols, the last one may hold last_count. */
#define DEFINE_DECODE(NAME, T, F, ATTR)                                                                     \
    ATTR static void NAME(const uint8_t *s, size_t nbytes, const uint64_t *starts, uint64_t *ends,          \
                          Py_ssize_t lanes, Py_ssize_t full, Py_ssize_t lane_syms, Py_ssize_t last_count,   \
                          const Tables *t, T *out) {                                                        \
        const uint32_t *prim = t->prim;                                                                     \
        const T *sorted = (const T *)t->sorted;                                                             \
        /* a lane reads at most lane_syms * max_len bits past its start, plus one 64-bit window */          \
        uint64_t span = (uint64_t)lane_syms * (uint64_t)t->max_len + 64;                                    \
        Py_ssize_t g = 0;                                                                                   \
        for (; g + NL <= full && starts[g + NL - 1] + span <= (uint64_t)nbytes * 8; g += NL)                \
            GROUP(T, F, READ_IN);                                                                           \
        for (; g + NL <= full; g += NL) GROUP(T, F, READ_CHECKED);                                          \
        for (; g < lanes; g++) {                                                                            \
            uint64_t p = starts[g];                                                                         \
            T *o = out + g * lane_syms;                                                                     \
            Py_ssize_t cnt = g < full ? lane_syms : last_count;                                             \
            for (Py_ssize_t j = 0; j < cnt; j++) {                                                          \
                uint64_t w = peek(s, nbytes, p);                                                            \
                ONE(T, w, p, o[j]);                                                                         \
            }                                                                                               \
            ends[g] = p;                                                                                    \
        }                                                                                                   \
    }

typedef int64_t (*encode_fn)(const void *, Py_ssize_t, Py_ssize_t, const uint32_t *, uint8_t *, uint32_t *);
typedef void (*decode_fn)(const uint8_t *, size_t, const uint64_t *, uint64_t *, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                          Py_ssize_t, const Tables *, void *);

/* Every kernel for (symbol width 1|2) x (codes per read 2|3|4), compiled with the function attribute ATTR. */
#define PER_F(DEFINE, NAME, T, ATTR) DEFINE(NAME##_f2, T, 2, ATTR) DEFINE(NAME##_f3, T, 3, ATTR) DEFINE(NAME##_f4, T, 4, ATTR)
#define F_ROW(NAME, FN) {(FN)NAME##_f2, (FN)NAME##_f3, (FN)NAME##_f4}
#define DEFINE_ALL(SUFFIX, ATTR)                                                                        \
    PER_F(DEFINE_ENCODE, encode8##SUFFIX, uint8_t, ATTR)                                                \
    PER_F(DEFINE_ENCODE, encode16##SUFFIX, uint16_t, ATTR)                                              \
    PER_F(DEFINE_DECODE, decode8##SUFFIX, uint8_t, ATTR)                                                \
    PER_F(DEFINE_DECODE, decode16##SUFFIX, uint16_t, ATTR)                                              \
    static const encode_fn ENCODE##SUFFIX[2][3] = {F_ROW(encode8##SUFFIX, encode_fn), F_ROW(encode16##SUFFIX, encode_fn)}; \
    static const decode_fn DECODE##SUFFIX[2][3] = {F_ROW(decode8##SUFFIX, decode_fn), F_ROW(decode16##SUFFIX, decode_fn)};

DEFINE_ALL(_base, )
static const encode_fn (*encode_k)[3] = ENCODE_base;
static const decode_fn (*decode_k)[3] = DECODE_base;
static const char *kernel_isa = "portable";

#if defined(__x86_64__) && defined(__GNUC__) /* gcc and clang */
/* The same source built for BMI2 (shifts by a register without the cl register), picked at import when the CPU
 * reports it; the portable build runs everywhere else. */
DEFINE_ALL(_bmi2, __attribute__((target("bmi,bmi2"))))
static int have_bmi2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("bmi2");
}
#else
static int have_bmi2(void) { return 0; }
#endif

/* Select a build: "bmi2" only where the CPU has it; "best" = bmi2 if present, else portable. */
static int use_kernels(const char *name) {
    int best = strcmp(name, "best") == 0;
    if (best || strcmp(name, "bmi2") == 0) {
        if (have_bmi2()) {
#if defined(__x86_64__) && defined(__GNUC__)
            encode_k = ENCODE_bmi2;
            decode_k = DECODE_bmi2;
            kernel_isa = "bmi2";
            return 0;
#endif
        }
        if (!best) return -1;
    } else if (strcmp(name, "portable") != 0) {
        return -1;
    }
    encode_k = ENCODE_base;
    decode_k = DECODE_base;
    kernel_isa = "portable";
    return 0;
}

static void put_le(uint8_t *p, uint32_t v, int width) {
    for (int k = 0; k < width; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* encode(symbols, width, enc_table, lane_syms, max_len) -> body bytes (lane lengths + stream), or None when
 * a symbol has no code. Body: u32 min | u8 width | (bits - min) as width-byte LE ints | MSB-first stream. */
static PyObject *py_encode(PyObject *self, PyObject *args) {
    Py_buffer sb, tb;
    int width, max_len;
    Py_ssize_t lane_syms;
    if (!PyArg_ParseTuple(args, "y*iy*ni", &sb, &width, &tb, &lane_syms, &max_len)) return NULL;
    PyObject *out = NULL;
    uint32_t *lane_bits = NULL;
    Py_ssize_t n = sb.len / (width == 2 ? 2 : 1);
    if ((width != 1 && width != 2) || tb.len != ((Py_ssize_t)4 << (8 * width)) || lane_syms < 1 || n < 1 ||
        max_len < 1 || max_len > 24) {
        PyErr_SetString(PyExc_ValueError, "huffman encode: bad arguments");
        goto done;
    }
    Py_ssize_t lanes = (n + lane_syms - 1) / lane_syms;
    Py_ssize_t stream_max = (n * max_len + 7) / 8;
    out = PyBytes_FromStringAndSize(NULL, 5 + 4 * lanes + stream_max + 16);
    lane_bits = (uint32_t *)malloc(sizeof(uint32_t) * lanes);
    if (out == NULL || lane_bits == NULL) {
        if (lane_bits == NULL) PyErr_NoMemory();
        Py_CLEAR(out);
        goto done;
    }
    uint8_t *buf = (uint8_t *)PyBytes_AS_STRING(out);
    uint8_t *stream = buf + 5 + lanes; /* guess one byte per lane length: moved below if wider */
    int f = 56 / max_len;              /* codes per flush: 7 pending bits + f codes fit in 63 */
    int64_t total;
    Py_BEGIN_ALLOW_THREADS
    total = encode_k[width - 1][(f > 4 ? 4 : f) - 2](sb.buf, n, lane_syms, tb.buf, stream, lane_bits);
    Py_END_ALLOW_THREADS
    if (total < 0) {
        Py_CLEAR(out);
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    uint32_t lo = lane_bits[0], hi = lane_bits[0];
    for (Py_ssize_t i = 1; i < lanes; i++) {
        lo = lane_bits[i] < lo ? lane_bits[i] : lo;
        hi = lane_bits[i] > hi ? lane_bits[i] : hi;
    }
    uint32_t spread = hi - lo;
    int lw = spread < (1u << 8) ? 1 : spread < (1u << 16) ? 2 : 4;
    Py_ssize_t nbytes = (Py_ssize_t)((total + 7) / 8);
    if (lw != 1) memmove(buf + 5 + lw * lanes, stream, nbytes);
    put_le(buf, lo, 4);
    buf[4] = (uint8_t)lw;
    for (Py_ssize_t i = 0; i < lanes; i++) put_le(buf + 5 + lw * i, lane_bits[i] - lo, lw);
    _PyBytes_Resize(&out, 5 + lw * lanes + nbytes);
done:
    free(lane_bits);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&tb);
    return out;
}

static uint32_t get_le(const uint8_t *p, int width) {
    uint32_t v = 0;
    for (int k = width - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

/* decode(lane_lengths, width, base, stream, count, lane_syms, prim, prim_bits, limit, delta, sorted, max_len, out)
 * -> (0,) | (1,) impossible lane length | (2, need) stream size | (3, lane, end, stored_end) lane end.
 * `out` (count symbols of `out`'s item size) is filled in stream order. */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    Py_buffer lb, sb, pb, limb, db, sortb, ob;
    int lw, prim_bits, max_len, more;
    unsigned long long base;
    Py_ssize_t count, lane_syms;
    if (!PyArg_ParseTuple(args, "y*iKy*nny*iy*y*y*iw*p", &lb, &lw, &base, &sb, &count, &lane_syms, &pb,
                          &prim_bits, &limb, &db, &sortb, &max_len, &ob, &more))
        return NULL;
    PyObject *res = NULL;
    uint64_t *starts = NULL;
    Py_ssize_t lanes = lane_syms > 0 ? (count + lane_syms - 1) / lane_syms : 0;
    Py_ssize_t item = ob.len / (count > 0 ? count : 1);
    if (lane_syms < 1 || count < 1 || (item != 1 && item != 2) || ob.len != item * count || lb.len != lw * lanes ||
        max_len < 1 || max_len > 24 || prim_bits != PRIM_BITS ||
        pb.len != ((Py_ssize_t)4 << PRIM_BITS) || limb.len != 4 * (max_len + 2) || db.len != 4 * (max_len + 2)) {
        PyErr_SetString(PyExc_ValueError, "huffman decode: bad arguments");
        goto done;
    }
    starts = (uint64_t *)malloc(sizeof(uint64_t) * 2 * lanes);
    if (starts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t *ends = starts + lanes;
    Py_ssize_t last_count = count - lane_syms * (lanes - 1);
    uint64_t total = 0;
    for (Py_ssize_t i = 0; i < lanes; i++) {
        uint64_t bits = base + get_le((const uint8_t *)lb.buf + lw * i, lw);
        uint64_t cnt = (uint64_t)(i + 1 < lanes ? lane_syms : last_count);
        if (bits > cnt * (uint64_t)max_len || bits < cnt) {
            res = Py_BuildValue("(i)", 1);
            goto done;
        }
        starts[i] = total;
        total += bits;
    }
    uint64_t need = (total + 7) / 8;
    if ((uint64_t)sb.len != need) {
        res = Py_BuildValue("(iK)", 2, (unsigned long long)need);
        goto done;
    }
    /* the sorted-symbol table must hold every index a valid length can produce */
    const uint32_t *limit = limb.buf;
    Py_ssize_t n_sorted = sortb.len / item;
    const int32_t *delta = db.buf;
    for (int l = 1; l <= max_len; l++) {
        int64_t lo = (int64_t)((l > 1 ? limit[l - 1] : 0) >> (max_len - l)) + delta[l];
        int64_t hi = (int64_t)(limit[l] >> (max_len - l)) + delta[l];
        if (limit[l] < (l > 1 ? limit[l - 1] : 0) || (hi > lo && (lo < 0 || hi > n_sorted))) {
            PyErr_SetString(PyExc_ValueError, "huffman decode: inconsistent tables");
            goto done;
        }
    }
    Tables t = {pb.buf, limit, delta, sortb.buf, prim_bits, max_len, more && 2 * max_len < 57};
    Py_ssize_t full = last_count == lane_syms ? lanes : lanes - 1;
    int f = 57 / max_len; /* symbols per 64-bit read: at least 57 of its bits are whole */
    const uint8_t *s = sb.buf;
    size_t nb = (size_t)sb.len;
    Py_BEGIN_ALLOW_THREADS
    decode_k[item - 1][(f > 4 ? 4 : f) - 2](s, nb, starts, ends, lanes, full, lane_syms, last_count, &t, ob.buf);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < lanes; i++) {
        uint64_t stored = i + 1 < lanes ? starts[i + 1] : total;
        if (ends[i] != stored) {
            res = Py_BuildValue("(inKK)", 3, i, (unsigned long long)ends[i], (unsigned long long)stored);
            goto done;
        }
    }
    res = Py_BuildValue("(i)", 0);
done:
    free(starts);
    PyBuffer_Release(&lb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&limb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&sortb);
    PyBuffer_Release(&ob);
    return res;
}

/* isa([name]) -> the kernel build in use, after switching to `name` ("portable", "bmi2" or "best") if given. */
static PyObject *py_isa(PyObject *self, PyObject *args) {
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|s", &name)) return NULL;
    if (name != NULL && use_kernels(name) < 0) {
        PyErr_Format(PyExc_ValueError, "kernel build %s is not available on this CPU", name);
        return NULL;
    }
    return PyUnicode_FromString(kernel_isa);
}

static PyMethodDef methods[] = {
    {"isa", py_isa, METH_VARARGS, "isa([name]) -> the kernel build in use (portable | bmi2), after switching"},
    {"encode", py_encode, METH_VARARGS, "encode(symbols, width, enc_table, lane_syms, max_len) -> bytes | None"},
    {"decode", py_decode, METH_VARARGS, "decode(...) -> status tuple; see huffman_c.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_huffman_c", "C Huffman lane coder", -1, methods};

PyMODINIT_FUNC PyInit__huffman_c(void) {
    use_kernels("best");
    return PyModule_Create(&module);
}
