/* CRC-32 of the frame.
 *
 * Part of _native.c's one compilation unit (#included there, in order: the
 * walk's hot calls inline across these files); not compiled on its own. */
#ifndef CKPT_NATIVE_CRC_H
#define CKPT_NATIVE_CRC_H

/* ---- CRC-32 of the frame (zlib's: reflected polynomial 0xEDB88320) ------------------
 *
 * zlib's braided loop costs about 4 instructions a byte; with carry-less multiplication
 * the buffer is folded 64 bytes at a time into four 128-bit lanes, the lanes into one,
 * then reduced to 32 bits (Barrett).  The fold constants are x^k mod P for the fold
 * distances, bit-reflected; crc_table covers the tail and CPUs without PCLMULQDQ.
 * tests/state/test_native_damage.py checks it against zlib.crc32. */
static uint32_t crc_table[256];

static void crc_table_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320U ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

/* On an inverted crc, as the folding code leaves it. */
static uint32_t crc_bytes(uint32_t c, const unsigned char *p, size_t n)
{
    while (n--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CRC_FOLD 1

/* a = a.lo * k.lo ^ a.hi * k.hi ^ next: one 128-bit lane moved forward by k's distance */
__attribute__((target("pclmul,sse2"))) static inline __m128i crc_fold(__m128i a, __m128i k,
                                                                       __m128i next)
{
    __m128i lo = _mm_clmulepi64_si128(a, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(a, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* n >= 64 and a multiple of 16; c and the result are inverted crcs. */
__attribute__((target("pclmul,sse2"))) static uint32_t crc_clmul(uint32_t c,
                                                                 const unsigned char *p,
                                                                 size_t n)
{
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k128 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k64 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x1F7011641LL, 0x1DB710641LL); /* u', P' */
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)c));
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        x0 = crc_fold(x0, k512, _mm_loadu_si128((const __m128i *)p));
        x1 = crc_fold(x1, k512, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = crc_fold(x2, k512, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = crc_fold(x3, k512, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x0 = crc_fold(x0, k128, x1);
    x0 = crc_fold(x0, k128, x2);
    x0 = crc_fold(x0, k128, x3);
    for (; n >= 16; p += 16, n -= 16)
        x0 = crc_fold(x0, k128, _mm_loadu_si128((const __m128i *)p));
    /* 128 -> 96 bits (and 32 zero bits appended) */
    __m128i t = _mm_clmulepi64_si128(x0, k128, 0x10);
    x0 = _mm_xor_si128(_mm_srli_si128(x0, 8), t);
    /* 96 -> 64 bits */
    t = _mm_srli_si128(x0, 4);
    x0 = _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), k64, 0x00);
    x0 = _mm_xor_si128(x0, t);
    /* Barrett reduction 64 -> 32 bits */
    t = _mm_and_si128(x0, mask32);
    t = _mm_clmulepi64_si128(t, poly, 0x10);
    t = _mm_and_si128(t, mask32);
    t = _mm_clmulepi64_si128(t, poly, 0x00);
    x0 = _mm_xor_si128(x0, t);
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(x0, 4));
}
#endif

static int crc_fast = -1;

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffU;
#ifdef CRC_FOLD
    if (crc_fast < 0) {
        __builtin_cpu_init();
        crc_fast = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
    }
    if (crc_fast && n >= 64) {
        size_t m = n & ~(size_t)15;
        c = crc_clmul(c, p, m);
        p += m;
        n -= m;
    }
#endif
    return ~crc_bytes(c, p, n);
}

/* Below this many bytes a CRC is computed holding the GIL: releasing and taking it
 * again cost more than the few hundred bytes of a small save's stream. */
#define CRC_UNLOCK_MIN ((size_t)64 << 10)

static uint32_t crc32_maybe_unlocked(const unsigned char *p, size_t n, int fast)
{
    uint32_t c;
    if (n < CRC_UNLOCK_MIN) {
        if (!crc_table[1])
            crc_table_init();
        return fast ? crc32_of(p, n) : ~crc_bytes(0xffffffffU, p, n);
    }
    Py_BEGIN_ALLOW_THREADS
    if (!crc_table[1])
        crc_table_init();
    c = fast ? crc32_of(p, n) : ~crc_bytes(0xffffffffU, p, n);
    Py_END_ALLOW_THREADS
    return c;
}

/* crc32(data, start, fast=True): zlib.crc32(data[start:]) (fast=False: the table, to
 * test both paths).  A module function (load checks frames with it) and, for the save
 * that framed the stream, a Walk method. */
static PyObject *crc32_py(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t start;
    int fast = 1;
    if (!PyArg_ParseTuple(args, "y*n|p", &buf, &start, &fast))
        return NULL;
    if (start < 0 || start > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "crc32: start outside the buffer");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)buf.buf + start;
    size_t n = (size_t)(buf.len - start);
    uint32_t c = crc32_maybe_unlocked(p, n, fast);
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(c);
}

/* The frame's header (wire.py's _HEADER, "<4sBIQ") and what this core checks in it;
 * native.py uses frame_body only where these agree with wire.py. */
#define FRAME_HEADER 17
#define FRAME_MAGIC "CKST"
#define FRAME_MIN_VERSION 1
#define FRAME_MAX_VERSION 2

/* frame_body(data): the payload of a well-formed frame (magic, version, length and
 * checksum all right) as a memoryview, or None for anything else: wire.check_frame
 * then says what is wrong, in one place.  A load's frame check in one call: the
 * Python one (struct unpack, slices and a separate crc32 call) cost a small load
 * about 10k instructions. */
static PyObject *frame_body(PyObject *self, PyObject *data)
{
    if (!PyBytes_Check(data) && !PyByteArray_Check(data) && !PyMemoryView_Check(data))
        Py_RETURN_NONE;
    Py_buffer buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not contiguous: wire.check_frame's path */
        Py_RETURN_NONE;
    }
    const unsigned char *p = (const unsigned char *)buf.buf;
    Py_ssize_t n = buf.len;
    int ok = n >= FRAME_HEADER && memcmp(p, FRAME_MAGIC, 4) == 0 &&
             p[4] >= FRAME_MIN_VERSION && p[4] <= FRAME_MAX_VERSION;
    if (ok) {
        uint32_t crc = (uint32_t)p[5] | (uint32_t)p[6] << 8 | (uint32_t)p[7] << 16 |
                       (uint32_t)p[8] << 24;
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)p[9 + i] << (8 * i);
        ok = len == (uint64_t)(n - FRAME_HEADER) &&
             crc32_maybe_unlocked(p + FRAME_HEADER, (size_t)(n - FRAME_HEADER), 1) == crc;
    }
    PyBuffer_Release(&buf);
    if (!ok)
        Py_RETURN_NONE;
    PyObject *view = PyMemoryView_FromObject(data);
    if (!view)
        return NULL;
    PyObject *body = PySequence_GetSlice(view, FRAME_HEADER, n);
    Py_DECREF(view);
    return body;
}

#endif
