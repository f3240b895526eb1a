/*
 * cdc_sql._rowdecode: the compiled row decoder.
 *
 * Decodes the row images of MySQL/MariaDB rows events (binlog format 4, full row images) into
 * Arrow column buffers, one Builder per table definition. It is the twin of the reference
 * decoder in cdc_sql/source/rows.py, which documents every rule; tests/unit/test_rowdecode.py
 * checks that both give the same Arrow arrays byte for byte. The Python wrapper
 * (cdc_sql/source/rowdecode_c.py) builds the column descriptions and turns the buffers into
 * Arrow arrays; text that needs a codec Python has (ucs2, utf16, utf32, server-converted
 * charsets, JSON, INET6, UUID) is handed back as raw bytes and finished there.
 *
 * Decoding runs without the GIL: the event bytes are pinned, everything else is C memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>

#include "_buffers.h"

/* binlog types */
enum {
    T_TINY = 1, T_SHORT = 2, T_LONG = 3, T_FLOAT = 4, T_DOUBLE = 5, T_TIMESTAMP = 7,
    T_LONGLONG = 8, T_INT24 = 9, T_DATE = 10, T_TIME = 11, T_DATETIME = 12, T_YEAR = 13,
    T_NEWDATE = 14, T_VARCHAR = 15, T_BIT = 16, T_TIMESTAMP2 = 17, T_DATETIME2 = 18,
    T_TIME2 = 19, T_JSON = 245, T_NEWDECIMAL = 246, T_ENUM = 247, T_SET = 248,
    T_BLOB = 252, T_VAR_STRING = 253, T_STRING = 254, T_GEOMETRY = 255
};

/* output kinds */
enum { O_I8 = 1, O_I16, O_I32, O_I64, O_DEC128, O_F32, O_F64, O_DATE32, O_TS64, O_VAR };

/* flags */
#define F_STRIP 1         /* CHAR: drop trailing spaces */
#define F_UTF8 2          /* text already UTF-8: validate it */
#define F_KEY_TEXT 4      /* temporal key column: its MySQL text too */
#define F_GEOMETRY 8      /* drop the 4-byte SRID */
#define F_DECIMAL_TEXT 16 /* DECIMAL wider than 38 digits, as text */
#define F_UNSIGNED 32

static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};




typedef struct {
    int type, meta, out, flags, pad, out_scale;
    int nmembers;
    char **members;         /* UTF-8 */
    Py_ssize_t *member_len;
    char **table;           /* 256 UTF-8 strings for single-byte charsets, or NULL */
    Py_ssize_t *table_len;
    /* output */
    Buf values, offsets, validity;
    Buf key_values, key_offsets, key_validity;
    int64_t nulls, key_nulls;
    int invalid_utf8;
} Column;

typedef struct {
    PyObject_HEAD
    int ncols, nkey;
    int *key;
    Column *cols;
    int64_t rows;
    int64_t nbytes;
    Buf offset_data, op_data, ts_data, txn_data;
    /* per-image scratch: where each field is */
    const unsigned char **field_at;
    size_t *field_len;
    char *field_null;
    const unsigned char **field_at2;
    size_t *field_len2;
    char *field_null2;
    char error[256];
} Builder;

/* -- helpers ------------------------------------------------------------------------------ */

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}


static inline void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t yy = (int64_t)yoe + era * 400;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = yy + (*m <= 2);
}

static inline int valid_date(int y, int m, int d) {
    static const int days[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y == 0 || m < 1 || m > 12 || d < 1) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= days[m] + (m == 2 && leap);
}

static inline int bit_width(int meta) { return (meta & 0xFF) * 8 + (meta >> 8); }

static inline int frac_bytes(int fsp) { return (fsp + 1) / 2; }

/* The size of a non-NULL field at p (at most `left` bytes there), or -1. */
static Py_ssize_t field_size(const Column *c, const unsigned char *p, size_t left) {
    int m = c->meta;
    switch (c->type) {
    case T_TINY: case T_YEAR: return 1;
    case T_SHORT: return 2;
    case T_INT24: case T_DATE: case T_NEWDATE: case T_TIME: return 3;
    case T_LONG: case T_FLOAT: case T_TIMESTAMP: return 4;
    case T_LONGLONG: case T_DOUBLE: case T_DATETIME: return 8;
    case T_NEWDECIMAL: {
        int precision = m >> 8, scale = m & 0xFF, intg = precision - scale;
        return intg / 9 * 4 + DIG2BYTES[intg % 9] + scale / 9 * 4 + DIG2BYTES[scale % 9];
    }
    case T_BIT: return (bit_width(m) + 7) / 8;
    case T_TIMESTAMP2: return 4 + frac_bytes(m);
    case T_DATETIME2: return 5 + frac_bytes(m);
    case T_TIME2: return 3 + frac_bytes(m);
    case T_ENUM: case T_SET: return m;
    case T_VARCHAR: case T_VAR_STRING: case T_STRING: {
        int prefix = m < 256 ? 1 : 2;
        if (left < (size_t)prefix) return -1;
        return prefix + (Py_ssize_t)le(p, prefix);
    }
    case T_BLOB: case T_GEOMETRY: case T_JSON: {
        if (m < 1 || m > 4 || left < (size_t)m) return -1;
        return m + (Py_ssize_t)le(p, m);
    }
    }
    return -1;
}

/* -- appending values ---------------------------------------------------------------------- */

static void clear_valid(Buf *validity, int64_t row) {
    validity->data[row / 8] &= (char)~(1 << (row % 8));
}

static int width_of(int out) {
    switch (out) {
    case O_I8: return 1;
    case O_I16: return 2;
    case O_I32: case O_F32: case O_DATE32: return 4;
    case O_I64: case O_F64: case O_TS64: return 8;
    case O_DEC128: return 16;
    }
    return 0;
}


static int append_null(Column *c, int64_t row) {
    c->nulls++;
    if (set_valid(&c->validity, row, 0)) return -1;
    if (c->out == O_VAR) return end_var(&c->values, &c->offsets);
    int w = width_of(c->out);
    if (buf_reserve(&c->values, w)) return -1;
    memset(c->values.data + c->values.len, 0, w);
    c->values.len += w;
    return 0;
}

static int append_key_text(Column *c, int64_t row, const char *text, int n) {
    if (!(c->flags & F_KEY_TEXT)) return 0;
    if (set_valid(&c->key_validity, row, text != NULL)) return -1;
    if (text == NULL) c->key_nulls++;
    else if (buf_put(&c->key_values, text, n)) return -1;
    return end_var(&c->key_values, &c->key_offsets);
}


static int append_text_bytes(Column *c, const unsigned char *s, size_t n) {
    if (c->table) {
        size_t start = c->values.len;
        for (size_t i = 0; i < n; i++)
            if (buf_put(&c->values, c->table[s[i]], c->table_len[s[i]])) return -1;
        if (c->flags & F_STRIP)
            while (c->values.len > start && c->values.data[c->values.len - 1] == ' ')
                c->values.len--;
        return 0;
    }
    if ((c->flags & F_UTF8) && !c->invalid_utf8 && !utf8_valid(s, n)) c->invalid_utf8 = 1;
    if ((c->flags & F_STRIP) && (c->flags & F_UTF8))
        while (n > 0 && s[n - 1] == ' ') n--;
    return buf_put(&c->values, s, n);
}

/* The decimal digits of v, at least `width` of them (zero-padded, as printf's %0*llu), into
   out (no NUL); returns how many. printf's parsing of its format was a tenth of capture's CPU
   when it wrote every row's offset. */
static int put_digits(char *out, unsigned long long v, int width) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n < width && n < (int)sizeof tmp) tmp[n++] = '0';
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

static void format_time(char *out, int *n, int64_t micros, int fsp) {
    uint64_t a = (uint64_t)(micros < 0 ? -micros : micros);
    uint64_t seconds = a / 1000000, fraction = a % 1000000;
    int k = 0;
    if (micros < 0) out[k++] = '-';
    k += put_digits(out + k, seconds / 3600, 2);
    out[k++] = ':';
    k += put_digits(out + k, seconds / 60 % 60, 2);
    out[k++] = ':';
    k += put_digits(out + k, seconds % 60, 2);
    if (fsp > 0 && fsp <= 6) {
        char f[8];
        put_digits(f, fraction, 6);
        out[k++] = '.';
        memcpy(out + k, f, fsp);
        k += fsp;
    }
    out[k] = 0;
    *n = k;
}

static int64_t fraction_micros(const unsigned char *p, int fsp, int is_signed) {
    if (fsp <= 0) return 0;
    int n = frac_bytes(fsp);
    int64_t v = (int64_t)be(p, n);
    if (is_signed && (p[0] & 0x80)) v -= (int64_t)1 << (8 * n);
    static const int scale[3] = {10000, 100, 1};
    return v * scale[(fsp - 1) / 2];
}

static int64_t time2_micros(const unsigned char *p, int fsp) {
    int64_t packed;
    if (fsp >= 5) {
        packed = (int64_t)be(p, 6) - 0x800000000000LL;
    } else {
        int fb = frac_bytes(fsp);
        int64_t intpart = (int64_t)be(p, 3) - 0x800000;
        int64_t frac = fb ? (int64_t)be(p + 3, fb) : 0;
        if (intpart < 0 && frac) { intpart += 1; frac -= (int64_t)1 << (8 * fb); }
        packed = intpart * (1LL << 24) + (fsp ? frac * (fsp <= 2 ? 10000 : 100) : 0);
    }
    int64_t a = packed < 0 ? -packed : packed;
    int64_t hms = a >> 24, micros = a % (1LL << 24);
    int64_t total = ((((hms >> 12) % 1024) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)) *
                     1000000LL) + micros;
    return packed < 0 ? -total : total;
}

/* Unscaled DECIMAL digits as int128 (precision <= 38) or text. */
static int decimal_value(const Column *c, const unsigned char *src, __int128 *unscaled,
                         char *text, int *text_len) {
    int precision = c->meta >> 8, scale = c->meta & 0xFF, intg = precision - scale;
    int size = intg / 9 * 4 + DIG2BYTES[intg % 9] + scale / 9 * 4 + DIG2BYTES[scale % 9];
    unsigned char d[64];
    if (size > 64) return -1;
    memcpy(d, src, size);
    int negative = !(d[0] & 0x80);
    d[0] ^= 0x80;
    if (negative) for (int i = 0; i < size; i++) d[i] ^= 0xFF;
    char digits[100];
    int nd = 0, p = 0;
    int lead = DIG2BYTES[intg % 9];
    if (lead) { nd += put_digits(digits + nd, be(d, lead), 0); p += lead; }
    for (int i = 0; i < intg / 9; i++) {
        nd += put_digits(digits + nd, be(d + p, 4), nd ? 9 : 0);
        p += 4;
    }
    /* strip leading zeros of the integer part (keep one) */
    int skip = 0;
    while (skip < nd - 1 && digits[skip] == '0') skip++;
    char intdigits[100];
    int ni = nd - skip > 0 ? nd - skip : 0;
    memcpy(intdigits, digits + skip, ni);
    if (ni == 0) { intdigits[0] = '0'; ni = 1; }
    char fracdigits[100];
    int nf = 0;
    for (int i = 0; i < scale / 9; i++) {
        nf += put_digits(fracdigits + nf, be(d + p, 4), 9);
        p += 4;
    }
    int tail = DIG2BYTES[scale % 9];
    if (tail) nf += put_digits(fracdigits + nf, be(d + p, tail), scale % 9);
    if (text) {
        int k = 0;
        int is_zero = 1;
        for (int i = 0; i < ni; i++) if (intdigits[i] != '0') is_zero = 0;
        for (int i = 0; i < nf; i++) if (fracdigits[i] != '0') is_zero = 0;
        if (negative && !is_zero) text[k++] = '-';
        memcpy(text + k, intdigits, ni); k += ni;
        if (nf) { text[k++] = '.'; memcpy(text + k, fracdigits, nf); k += nf; }
        *text_len = k;
        return 0;
    }
    __int128 v = 0;
    for (int i = 0; i < ni; i++) v = v * 10 + (intdigits[i] - '0');
    for (int i = 0; i < nf; i++) v = v * 10 + (fracdigits[i] - '0');
    for (int i = scale; i < c->out_scale; i++) v *= 10;  /* a wider scale (a widened column) */
    *unscaled = negative ? -v : v;
    return 0;
}

/* Decode one non-NULL field into column c (row `row`). */
static int append_value(Builder *b, Column *c, int64_t row, const unsigned char *p, size_t n) {
    char text[160];
    int tn = 0;
    if (set_valid(&c->validity, row, 1)) return -1;
    switch (c->type) {
    case T_TINY: case T_SHORT: case T_INT24: case T_LONG: case T_LONGLONG: {
        int size = c->type == T_TINY ? 1 : c->type == T_SHORT ? 2 : c->type == T_INT24 ? 3 :
                   c->type == T_LONG ? 4 : 8;
        uint64_t u = le(p, size);
        int64_t v;
        if (c->flags & F_UNSIGNED) v = (int64_t)u;
        else if (size < 8 && (u >> (8 * size - 1)) & 1) v = (int64_t)(u - ((uint64_t)1 << (8 * size)));
        else v = (int64_t)u;
        if (c->out == O_DEC128) {
            __int128 w = (c->flags & F_UNSIGNED) ? (__int128)u : (__int128)v;
            return buf_put(&c->values, &w, 16);
        }
        int w = width_of(c->out);
        int8_t i8 = (int8_t)v; int16_t i16 = (int16_t)v; int32_t i32 = (int32_t)v;
        if (w == 1) return buf_put(&c->values, &i8, 1);
        if (w == 2) return buf_put(&c->values, &i16, 2);
        if (w == 4) return buf_put(&c->values, &i32, 4);
        return buf_put(&c->values, &v, 8);
    }
    case T_YEAR: {
        int16_t y = p[0] ? (int16_t)(1900 + p[0]) : 0;
        return buf_put(&c->values, &y, 2);
    }
    case T_FLOAT: {
        if (c->out == O_F64) { float f; memcpy(&f, p, 4); double d = f; return buf_put(&c->values, &d, 8); }
        return buf_put(&c->values, p, 4);
    }
    case T_DOUBLE: return buf_put(&c->values, p, 8);
    case T_NEWDECIMAL: {
        if (c->flags & F_DECIMAL_TEXT) {
            if (decimal_value(c, p, NULL, text, &tn)) return -1;
            if (buf_put(&c->values, text, tn)) return -1;
            return end_var(&c->values, &c->offsets);
        }
        __int128 v;
        if (decimal_value(c, p, &v, NULL, NULL)) return -1;
        return buf_put(&c->values, &v, 16);
    }
    case T_BIT: {
        int nb = (bit_width(c->meta) + 7) / 8;
        uint64_t v = be(p, nb);
        if (c->out == O_I64) { int64_t s = (int64_t)v; return buf_put(&c->values, &s, 8); }
        unsigned char out[8];
        for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (8 * (7 - i)));
        if (buf_put(&c->values, out, 8)) return -1;
        return end_var(&c->values, &c->offsets);
    }
    case T_DATE: case T_NEWDATE: case T_DATETIME2: case T_DATETIME: {
        int y, m, d, hh = 0, mi = 0, ss = 0;
        int64_t us = 0;
        if (c->type == T_DATE || c->type == T_NEWDATE) {
            uint32_t v = (uint32_t)le(p, 3);
            y = v >> 9; m = (v >> 5) & 15; d = v & 31;
        } else if (c->type == T_DATETIME2) {
            int64_t intpart = (int64_t)be(p, 5) - 0x8000000000LL;
            us = fraction_micros(p + 5, c->meta, 1);
            int64_t ymd = intpart >> 17, hms = intpart % (1 << 17), ym = ymd >> 5;
            y = (int)(ym / 13); m = (int)(ym % 13); d = (int)(ymd % 32);
            hh = (int)(hms >> 12); mi = (int)((hms >> 6) & 63); ss = (int)(hms & 63);
        } else {
            uint64_t v = le(p, 8), dd = v / 1000000, tt = v % 1000000;
            y = (int)(dd / 10000); m = (int)(dd / 100 % 100); d = (int)(dd % 100);
            hh = (int)(tt / 10000); mi = (int)(tt / 100 % 100); ss = (int)(tt % 100);
        }
        int ok = valid_date(y, m, d) && hh < 24 && mi < 60 && ss < 60 && us >= 0 && us < 1000000;
        if (!ok) {
            c->nulls++;
            clear_valid(&c->validity, row);
            int w = width_of(c->out);
            if (buf_reserve(&c->values, w)) return -1;
            memset(c->values.data + c->values.len, 0, w);
            c->values.len += w;
        } else if (c->out == O_DATE32) {
            int32_t days = (int32_t)days_from_civil(y, m, d);
            if (buf_put(&c->values, &days, 4)) return -1;
        } else {
            int64_t t = (days_from_civil(y, m, d) * 86400 + hh * 3600 + mi * 60 + ss) * 1000000LL + us;
            if (buf_put(&c->values, &t, 8)) return -1;
        }
        if (c->flags & F_KEY_TEXT) {
            y = y < 0 ? 0 : y;
            if (c->out == O_DATE32) tn = sprintf(text, "%04d-%02d-%02d", y, m, d);
            else {
                tn = sprintf(text, "%04d-%02d-%02d %02d:%02d:%02d", y, m, d, hh, mi, ss);
                int fsp = c->type == T_DATETIME2 ? c->meta : 0;
                if (fsp) { char f[8]; sprintf(f, "%06lld", (long long)us); text[tn++] = '.'; memcpy(text + tn, f, fsp); tn += fsp; }
            }
            return append_key_text(c, row, text, tn);
        }
        return 0;
    }
    case T_TIMESTAMP2: case T_TIMESTAMP: {
        int64_t sec, us = 0;
        if (c->type == T_TIMESTAMP2) { sec = (int64_t)be(p, 4); us = fraction_micros(p + 4, c->meta, 0); }
        else sec = (int64_t)le(p, 4);
        if (sec == 0) {
            c->nulls++;
            clear_valid(&c->validity, row);
            int64_t zero = 0;
            if (buf_put(&c->values, &zero, 8)) return -1;
        } else {
            int64_t t = sec * 1000000LL + us;
            if (buf_put(&c->values, &t, 8)) return -1;
        }
        if (c->flags & F_KEY_TEXT) {
            int fsp = c->type == T_TIMESTAMP2 ? c->meta : 0;
            if (sec == 0) tn = sprintf(text, "0000-00-00 00:00:00");
            else {
                int64_t y; unsigned m, d;
                int64_t days = sec / 86400, rest = sec % 86400;
                civil_from_days(days, &y, &m, &d);
                tn = sprintf(text, "%04lld-%02u-%02u %02d:%02d:%02d", (long long)y, m, d,
                             (int)(rest / 3600), (int)(rest / 60 % 60), (int)(rest % 60));
            }
            if (fsp) { char f[8]; sprintf(f, "%06lld", (long long)us); text[tn++] = '.'; memcpy(text + tn, f, fsp); tn += fsp; }
            return append_key_text(c, row, text, tn);
        }
        return 0;
    }
    case T_TIME2: case T_TIME: {
        int64_t micros;
        int fsp = 0;
        if (c->type == T_TIME2) { fsp = c->meta; micros = time2_micros(p, fsp); }
        else {
            int64_t v = (int64_t)le(p, 3);
            if (v & 0x800000) v -= 0x1000000;
            int64_t a = v < 0 ? -v : v;
            micros = ((a / 10000) * 3600 + (a / 100 % 100) * 60 + a % 100) * 1000000LL;
            if (v < 0) micros = -micros;
        }
        format_time(text, &tn, micros, fsp);
        if (buf_put(&c->values, text, tn)) return -1;
        return end_var(&c->values, &c->offsets);
    }
    case T_ENUM: {
        uint64_t index = le(p, c->meta);
        if (index > 0 && index <= (uint64_t)c->nmembers &&
            buf_put(&c->values, c->members[index - 1], c->member_len[index - 1])) return -1;
        return end_var(&c->values, &c->offsets);
    }
    case T_SET: {
        uint64_t mask = le(p, c->meta);
        int first = 1;
        for (int i = 0; i < c->nmembers && i < 64; i++) {
            if (!((mask >> i) & 1)) continue;
            if (!first && buf_put(&c->values, ",", 1)) return -1;
            if (buf_put(&c->values, c->members[i], c->member_len[i])) return -1;
            first = 0;
        }
        return end_var(&c->values, &c->offsets);
    }
    case T_STRING: case T_VARCHAR: case T_VAR_STRING: case T_BLOB: case T_GEOMETRY: case T_JSON: {
        int prefix = (c->type == T_BLOB || c->type == T_GEOMETRY || c->type == T_JSON) ? c->meta :
                     (c->meta < 256 ? 1 : 2);
        const unsigned char *s = p + prefix;
        size_t len = n - prefix;
        if (c->flags & F_GEOMETRY) { s += len >= 4 ? 4 : len; len = len >= 4 ? len - 4 : 0; }
        if (c->flags & (F_UTF8) || c->table) {
            if (append_text_bytes(c, s, len)) return -1;
        } else {
            if (buf_put(&c->values, s, len)) return -1;
            if (c->pad > 0 && len < (size_t)c->pad) {
                size_t extra = c->pad - len;
                if (buf_reserve(&c->values, extra)) return -1;
                memset(c->values.data + c->values.len, 0, extra);
                c->values.len += extra;
            }
        }
        return end_var(&c->values, &c->offsets);
    }
    }
    snprintf(b->error, sizeof b->error, "column %d (binlog type %d, metadata %d) is not supported",
             (int)(c - b->cols), c->type, c->meta);
    return -2;
}

/* -- images ------------------------------------------------------------------------------- */
/* Locate every field of one image starting at *pp; returns 0, or -1 with b->error set. */
static int locate(Builder *b, const unsigned char **pp, const unsigned char *end,
                  const unsigned char **at, size_t *len, char *isnull) {
    const unsigned char *p = *pp;
    size_t nb = (size_t)(b->ncols + 7) / 8;
    if ((size_t)(end - p) < nb) { snprintf(b->error, sizeof b->error, "row image cut short"); return -1; }
    const unsigned char *nulls = p;
    p += nb;
    for (int i = 0; i < b->ncols; i++) {
        if (nulls[i / 8] & (1 << (i % 8))) { isnull[i] = 1; at[i] = NULL; len[i] = 0; continue; }
        isnull[i] = 0;
        Py_ssize_t size = field_size(&b->cols[i], p, (size_t)(end - p));
        if (size < 0 || (size_t)size > (size_t)(end - p)) {
            snprintf(b->error, sizeof b->error, "column %d (binlog type %d, metadata %d) runs "
                     "past the end of its rows event", i, b->cols[i].type, b->cols[i].meta);
            return -1;
        }
        at[i] = p;
        len[i] = (size_t)size;
        p += size;
    }
    *pp = p;
    return 0;
}

static int emit(Builder *b, const unsigned char **at, size_t *len, char *isnull, char op,
                int file_seq, int64_t pos, int row_in_event, int64_t ts, int32_t txn) {
    int64_t row = b->rows;
    for (int i = 0; i < b->ncols; i++) {
        Column *c = &b->cols[i];
        int r;
        if (isnull[i]) {
            r = append_null(c, row);
            if (!r && (c->flags & F_KEY_TEXT)) r = append_key_text(c, row, NULL, 0);
        } else {
            r = append_value(b, c, row, at[i], len[i]);
        }
        if (r) {
            if (!b->error[0]) snprintf(b->error, sizeof b->error, "out of memory");
            return -1;
        }
    }
    char offset[80];  /* _cdc_offset: "%06d:%012lld:%06d", its first 26 characters */
    int k = put_digits(offset, (unsigned)file_seq, 6);
    offset[k++] = ':';
    k += put_digits(offset + k, (unsigned long long)pos, 12);
    offset[k++] = ':';
    put_digits(offset + k, (unsigned)row_in_event, 6);
    if (buf_put(&b->offset_data, offset, 26) || buf_put(&b->op_data, &op, 1) ||
        buf_put(&b->ts_data, &ts, 8) || buf_put(&b->txn_data, &txn, 4)) {
        snprintf(b->error, sizeof b->error, "out of memory");
        return -1;
    }
    b->rows++;
    return 0;
}

static int key_equal(Builder *b) {
    for (int k = 0; k < b->nkey; k++) {
        int i = b->key[k];
        if (b->field_null[i] || b->field_null2[i]) {
            if (b->field_null[i] != b->field_null2[i]) return 0;
            continue;
        }
        if (b->field_len[i] != b->field_len2[i]) return 0;
        if (memcmp(b->field_at[i], b->field_at2[i], b->field_len[i])) return 0;
    }
    return 1;
}

/* The rows of one event; returns the row changes added, or -1 with b->error set. `count_only`:
   locate the fields and compare the keys, add nothing (what count() returns). */
static int64_t decode_event(Builder *b, const unsigned char *data, size_t size, size_t start,
                            char op, int file_seq, int64_t pos, int64_t ts, int32_t txn,
                            int count_only) {
    const unsigned char *p = data + start, *end = data + size;
    if (p >= end) { snprintf(b->error, sizeof b->error, "empty rows event"); return -1; }
    uint64_t count;
    unsigned char first = *p;
    if (first < 251) { count = first; p += 1; }
    else if (first == 252) { count = le(p + 1, 2); p += 3; }
    else if (first == 253) { count = le(p + 1, 3); p += 4; }
    else { count = le(p + 1, 8); p += 9; }
    if (count != (uint64_t)b->ncols) {
        snprintf(b->error, sizeof b->error, "rows event has %llu columns, its table map %d",
                 (unsigned long long)count, b->ncols);
        return -1;
    }
    size_t nb = (size_t)(b->ncols + 7) / 8;
    int images = op == 'u' ? 2 : 1;
    for (int k = 0; k < images; k++) {
        for (int i = 0; i < b->ncols; i++)
            if (!(p[i / 8] & (1 << (i % 8)))) {
                snprintf(b->error, sizeof b->error, "rows event does not carry every column: "
                         "the source must log full row images (binlog_row_image=FULL)");
                return -1;
            }
        p += nb;
    }
    int64_t added = 0;
    int row_in_event = 0;
    while (p < end) {
        if (locate(b, &p, end, b->field_at, b->field_len, b->field_null)) return -1;
        if (op == 'u') {
            if (locate(b, &p, end, b->field_at2, b->field_len2, b->field_null2)) return -1;
            if (key_equal(b)) {
                if (!count_only && emit(b, b->field_at2, b->field_len2, b->field_null2, 'u',
                                        file_seq, pos, row_in_event, ts, txn)) return -1;
                added += 1;
            } else {
                if (!count_only && (
                    emit(b, b->field_at, b->field_len, b->field_null, 'd', file_seq, pos,
                         row_in_event, ts, txn) ||
                    emit(b, b->field_at2, b->field_len2, b->field_null2, 'c', file_seq, pos,
                         row_in_event, ts, txn))) return -1;
                added += 2;
            }
        } else {
            if (!count_only && emit(b, b->field_at, b->field_len, b->field_null, op, file_seq,
                                    pos, row_in_event, ts, txn)) return -1;
            added += 1;
        }
        row_in_event++;
    }
    if (!count_only) b->nbytes += (int64_t)(size - start);
    return added;
}

/* -- Python type -------------------------------------------------------------------------- */
static void free_outputs(Builder *b) {
    for (int i = 0; i < b->ncols; i++) {
        Column *c = &b->cols[i];
        free(c->values.data); free(c->offsets.data); free(c->validity.data);
        free(c->key_values.data); free(c->key_offsets.data); free(c->key_validity.data);
        memset(&c->values, 0, sizeof(Buf)); memset(&c->offsets, 0, sizeof(Buf));
        memset(&c->validity, 0, sizeof(Buf)); memset(&c->key_values, 0, sizeof(Buf));
        memset(&c->key_offsets, 0, sizeof(Buf)); memset(&c->key_validity, 0, sizeof(Buf));
        c->nulls = c->key_nulls = 0;
        c->invalid_utf8 = 0;
    }
    free(b->offset_data.data); free(b->op_data.data); free(b->ts_data.data); free(b->txn_data.data);
    memset(&b->offset_data, 0, sizeof(Buf)); memset(&b->op_data, 0, sizeof(Buf));
    memset(&b->ts_data, 0, sizeof(Buf)); memset(&b->txn_data, 0, sizeof(Buf));
    b->rows = 0;
    b->nbytes = 0;
}

static int start_outputs(Builder *b) {
    int32_t zero = 0;
    for (int i = 0; i < b->ncols; i++) {
        Column *c = &b->cols[i];
        if (c->out == O_VAR && buf_put(&c->offsets, &zero, 4)) return -1;
        if ((c->flags & F_KEY_TEXT) && buf_put(&c->key_offsets, &zero, 4)) return -1;
    }
    return 0;
}

static void Builder_dealloc(Builder *b) {
    free_outputs(b);
    for (int i = 0; i < b->ncols; i++) {
        Column *c = &b->cols[i];
        for (int k = 0; k < c->nmembers; k++) free(c->members[k]);
        free(c->members); free(c->member_len);
        if (c->table) { for (int k = 0; k < 256; k++) free(c->table[k]); }
        free(c->table); free(c->table_len);
    }
    free(b->cols); free(b->key);
    free(b->field_at); free(b->field_len); free(b->field_null);
    free(b->field_at2); free(b->field_len2); free(b->field_null2);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int copy_strings(PyObject *seq, int expect, char ***out, Py_ssize_t **lens, int *count) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of bytes");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (expect >= 0 && n != expect) { Py_DECREF(fast); PyErr_SetString(PyExc_ValueError, "wrong count"); return -1; }
    *out = calloc(n ? n : 1, sizeof(char *));
    *lens = calloc(n ? n : 1, sizeof(Py_ssize_t));
    for (Py_ssize_t k = 0; k < n; k++) {
        char *s; Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(fast, k), &s, &len)) { Py_DECREF(fast); return -1; }
        (*out)[k] = malloc(len ? len : 1);
        memcpy((*out)[k], s, len);
        (*lens)[k] = len;
    }
    if (count) *count = (int)n;
    Py_DECREF(fast);
    return 0;
}

/* Builder(columns, key): columns are (type, meta, out, flags, pad, out_scale, members or None,
   table or None); key the positions of the key columns. */
static int Builder_init(Builder *b, PyObject *args, PyObject *kwds) {
    PyObject *columns, *key;
    if (!PyArg_ParseTuple(args, "OO", &columns, &key)) return -1;
    PyObject *cols = PySequence_Fast(columns, "columns must be a sequence");
    if (!cols) return -1;
    b->ncols = (int)PySequence_Fast_GET_SIZE(cols);
    b->cols = calloc(b->ncols ? b->ncols : 1, sizeof(Column));
    for (int i = 0; i < b->ncols; i++) {
        Column *c = &b->cols[i];
        PyObject *members, *table;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(cols, i), "iiiiiiOO", &c->type, &c->meta,
                              &c->out, &c->flags, &c->pad, &c->out_scale, &members, &table)) {
            Py_DECREF(cols);
            return -1;
        }
        if (members != Py_None && copy_strings(members, -1, &c->members, &c->member_len, &c->nmembers)) { Py_DECREF(cols); return -1; }
        if (table != Py_None && copy_strings(table, 256, &c->table, &c->table_len, NULL)) { Py_DECREF(cols); return -1; }
    }
    Py_DECREF(cols);
    PyObject *keys = PySequence_Fast(key, "key must be a sequence");
    if (!keys) return -1;
    b->nkey = (int)PySequence_Fast_GET_SIZE(keys);
    b->key = calloc(b->nkey ? b->nkey : 1, sizeof(int));
    for (int k = 0; k < b->nkey; k++) b->key[k] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(keys, k));
    Py_DECREF(keys);
    int n = b->ncols ? b->ncols : 1;
    b->field_at = calloc(n, sizeof(void *)); b->field_len = calloc(n, sizeof(size_t)); b->field_null = calloc(n, 1);
    b->field_at2 = calloc(n, sizeof(void *)); b->field_len2 = calloc(n, sizeof(size_t)); b->field_null2 = calloc(n, 1);
    if (start_outputs(b)) { PyErr_NoMemory(); return -1; }
    return 0;
}

/* decode_event without the GIL (the event bytes are pinned by `view`, which is released here):
   the row changes as a Python int, or NULL with ValueError set. */
static PyObject *decoded(Builder *b, Py_buffer *view, Py_ssize_t start, int op, int file_seq,
                         long long pos, long long timestamp, int txn, int count_only) {
    int64_t added;
    b->error[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    added = decode_event(b, view->buf, (size_t)view->len, (size_t)start, (char)op, file_seq, pos,
                         timestamp * 1000000LL, txn, count_only);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(view);
    if (added < 0) {
        PyErr_SetString(PyExc_ValueError, b->error[0] ? b->error : "cannot decode the rows event");
        return NULL;
    }
    return PyLong_FromLongLong(added);
}

static PyObject *Builder_add(Builder *b, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    int op, file_seq, txn;
    long long pos, timestamp;
    if (!PyArg_ParseTuple(args, "y*nCiLLi", &view, &start, &op, &file_seq, &pos, &timestamp, &txn))
        return NULL;
    return decoded(b, &view, start, op, file_seq, pos, timestamp, txn, 0);
}

/* count(body, start, op) -> the row changes add() would add (a key-changing update is two),
   without decoding a value: how the reader sizes batches while worker threads decode. */
static PyObject *Builder_count(Builder *b, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    int op;
    if (!PyArg_ParseTuple(args, "y*nC", &view, &start, &op)) return NULL;
    return decoded(b, &view, start, op, 0, 0, 0, 0, 1);
}


/* finish() -> (rows, [(values, offsets|None, validity, nulls, invalid_utf8)...],
                [(key_values, key_offsets, key_validity, key_nulls)|None ...],
                offsets, ops, timestamps, txns); the builder starts empty again. */
static PyObject *Builder_finish(Builder *b, PyObject *unused) {
    PyObject *columns = PyList_New(b->ncols), *keys = PyList_New(b->ncols);
    if (!columns || !keys) return NULL;
    for (int i = 0; i < b->ncols; i++) {
        Column *c = &b->cols[i];
        PyObject *item = Py_BuildValue("(NNNLi)", bytes_of(&c->values),
                                       c->out == O_VAR ? bytes_of(&c->offsets) : Py_NewRef(Py_None),
                                       bytes_of(&c->validity), (long long)c->nulls, c->invalid_utf8);
        PyList_SET_ITEM(columns, i, item);
        if (c->flags & F_KEY_TEXT) {
            PyList_SET_ITEM(keys, i, Py_BuildValue("(NNNL)", bytes_of(&c->key_values),
                                                   bytes_of(&c->key_offsets),
                                                   bytes_of(&c->key_validity),
                                                   (long long)c->key_nulls));
        } else {
            PyList_SET_ITEM(keys, i, Py_NewRef(Py_None));
        }
    }
    PyObject *result = Py_BuildValue("(LNNNNNN)", (long long)b->rows, columns, keys,
                                     bytes_of(&b->offset_data), bytes_of(&b->op_data),
                                     bytes_of(&b->ts_data), bytes_of(&b->txn_data));
    free_outputs(b);
    if (start_outputs(b)) return PyErr_NoMemory();
    return result;
}

static PyObject *Builder_rows(Builder *b, void *closure) { return PyLong_FromLongLong(b->rows); }
static PyObject *Builder_nbytes(Builder *b, void *closure) { return PyLong_FromLongLong(b->nbytes); }

static PyMethodDef Builder_methods[] = {
    {"add", (PyCFunction)Builder_add, METH_VARARGS,
     "add(body, start, op, file_seq, pos, timestamp, txn) -> row changes added"},
    {"finish", (PyCFunction)Builder_finish, METH_NOARGS, "the buffers so far; starts empty again"},
    {"count", (PyCFunction)Builder_count, METH_VARARGS,
     "count(body, start, op) -> row changes add() would add; adds nothing"},
    {NULL}
};

static PyGetSetDef Builder_getset[] = {
    {"rows", (getter)Builder_rows, NULL, "row changes held", NULL},
    {"nbytes", (getter)Builder_nbytes, NULL, "event bytes decoded", NULL},
    {NULL}
};

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdc_sql._rowdecode.Builder",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Builder_init,
    .tp_dealloc = (destructor)Builder_dealloc,
    .tp_methods = Builder_methods,
    .tp_getset = Builder_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rowdecode",
                                    "The compiled row decoder of cdc-sql.", -1, NULL};

PyMODINIT_FUNC PyInit__rowdecode(void) {
    if (PyType_Ready(&BuilderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&BuilderType);
    PyModule_AddObject(m, "Builder", (PyObject *)&BuilderType);
    return m;
}
