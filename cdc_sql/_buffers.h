/*
 * cdc_sql/_buffers.h: what the compiled decoders share (_rowdecode.c, _resultrows.c): growing
 * byte buffers that become Arrow buffers, validity bits, civil dates, UTF-8 validity.
 */
#ifndef CDC_SQL_BUFFERS_H
#define CDC_SQL_BUFFERS_H
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static int set_valid(Buf *validity, int64_t row, int valid) {
    size_t need = (size_t)(row / 8 + 1);
    if (validity->len < need) {
        if (buf_reserve(validity, need - validity->len)) return -1;
        memset(validity->data + validity->len, 0, need - validity->len);
        validity->len = need;
    }
    if (valid) validity->data[row / 8] |= (char)(1 << (row % 8));
    return 0;
}

static int end_var(Buf *values, Buf *offsets) {
    int32_t end = (int32_t)values->len;
    if (values->len > 0x7FFFFFFF) return -1;
    return buf_put(offsets, &end, 4);
}

/* UTF-8 validity (RFC 3629: no surrogates, no overlong forms, at most U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; if (c < 0xC2) return 0; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; if (c > 0xF4) return 0; }
        else return 0;
        if (i + k >= n) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

static PyObject *bytes_of(Buf *buf) {
    return PyBytes_FromStringAndSize(buf->data ? buf->data : "", (Py_ssize_t)buf->len);
}

#endif
