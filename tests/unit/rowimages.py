"""MySQL's binary row-image formats, written from values: an encoder independent of the decoders
(rows.py, _rowdecode.c), so that decode(encode(value)) can be checked against the value, and
random row images fed to both decoders. Formats as MySQL's field.cc and my_time.c write them."""
from __future__ import annotations

import decimal
import struct

from cdc_sql.source import binlog_events as ev

DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def packed_int(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 2**16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 2**24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def _c_mod(x: int, m: int) -> int:
    """C's %, which truncates toward zero."""
    q = abs(x) // m
    return x - (q * m if x >= 0 else -q * m)


def integer(value: int, size: int, unsigned: bool) -> bytes:
    return value.to_bytes(size, "little", signed=not unsigned)


def decimal_binary(value: decimal.Decimal, precision: int, scale: int) -> bytes:
    """decimal2bin: nine digits per four bytes, partial groups in fewer; sign in the top bit."""
    negative = value < 0
    wide = decimal.Context(prec=100)
    text = format(value.copy_abs().quantize(decimal.Decimal(1).scaleb(-scale), context=wide),
                  "f")
    whole, _, fraction = text.partition(".")
    intg = precision - scale
    whole = whole.lstrip("0").rjust(intg, "0")[-intg:] if intg else ""
    fraction = fraction.ljust(scale, "0")[:scale]
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(whole[:lead]).to_bytes(DIG2BYTES[lead], "big")
    for k in range(lead, intg, 9):
        out += int(whole[k:k + 9]).to_bytes(4, "big")
    for k in range(0, scale - scale % 9, 9):
        out += int(fraction[k:k + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(fraction[scale - scale % 9:]).to_bytes(DIG2BYTES[scale % 9], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def fraction(micros: int, fsp: int, negative_ok: bool = False) -> bytes:
    if not fsp:
        return b""
    if fsp <= 2:
        return (micros // 10000).to_bytes(1, "big", signed=negative_ok)
    if fsp <= 4:
        return (micros // 100).to_bytes(2, "big", signed=negative_ok)
    return micros.to_bytes(3, "big", signed=negative_ok)


def date(y: int, m: int, d: int) -> bytes:
    return (y << 9 | m << 5 | d).to_bytes(3, "little")


def datetime2(y, m, d, hh, mi, ss, us, fsp) -> bytes:
    intpart = ((y * 13 + m) << 5 | d) << 17 | (hh << 12 | mi << 6 | ss)
    return (intpart + 0x8000000000).to_bytes(5, "big") + fraction(us - us % 10 ** (6 - fsp)
                                                                   if fsp else 0, fsp)


def old_datetime(y, m, d, hh, mi, ss) -> bytes:
    return (((y * 10000 + m * 100 + d) * 1000000) + hh * 10000 + mi * 100 + ss).to_bytes(
        8, "little")


def timestamp2(seconds: int, us: int, fsp: int) -> bytes:
    return seconds.to_bytes(4, "big") + fraction(us - us % 10 ** (6 - fsp) if fsp else 0, fsp)


def time2(micros: int, fsp: int) -> bytes:
    """my_time_packed_to_binary, from a signed duration in microseconds (already at fsp)."""
    sign = -1 if micros < 0 else 1
    seconds, us = divmod(abs(micros), 1_000_000)
    hms = (seconds // 3600) << 12 | (seconds // 60 % 60) << 6 | seconds % 60
    packed = sign * ((hms << 24) + us)
    int_part, frac = packed >> 24, _c_mod(packed, 1 << 24)
    head = (int_part + 0x800000).to_bytes(3, "big")
    if fsp == 0:
        return head
    if fsp <= 2:
        return head + (frac // 10000 if frac >= 0 else -(-frac // 10000)).to_bytes(
            1, "big", signed=True)
    if fsp <= 4:
        return head + (frac // 100 if frac >= 0 else -(-frac // 100)).to_bytes(
            2, "big", signed=True)
    return (packed + 0x800000000000).to_bytes(6, "big")


def old_time(micros: int) -> bytes:
    sign = -1 if micros < 0 else 1
    seconds = abs(micros) // 1_000_000
    return (sign * ((seconds // 3600) * 10000 + (seconds // 60 % 60) * 100 + seconds % 60)
            ).to_bytes(3, "little", signed=True)


def var(data: bytes, prefix: int) -> bytes:
    return len(data).to_bytes(prefix, "little") + data


def value(t: int, meta: int, unsigned: bool, v) -> bytes:  # noqa: C901 - one branch per type
    """The bytes of one non-NULL value (`v` already in the column's own terms)."""
    sizes = {ev.T_TINY: 1, ev.T_SHORT: 2, ev.T_INT24: 3, ev.T_LONG: 4, ev.T_LONGLONG: 8}
    if t in sizes:
        return integer(v, sizes[t], unsigned)
    if t == ev.T_YEAR:
        return bytes([0 if v == 0 else v - 1900])
    if t == ev.T_FLOAT:
        return struct.pack("<f", v)
    if t == ev.T_DOUBLE:
        return struct.pack("<d", v)
    if t == ev.T_NEWDECIMAL:
        return decimal_binary(v, meta >> 8, meta & 0xFF)
    if t == ev.T_BIT:
        nbits = (meta & 0xFF) * 8 + (meta >> 8)
        return v.to_bytes((nbits + 7) // 8, "big")
    if t in (ev.T_DATE, ev.T_NEWDATE):
        return date(*v)
    if t == ev.T_DATETIME2:
        return datetime2(*v, meta)
    if t == ev.T_DATETIME:
        return old_datetime(*v[:6])
    if t == ev.T_TIMESTAMP2:
        return timestamp2(*v, meta)
    if t == ev.T_TIMESTAMP:
        return v[0].to_bytes(4, "little")
    if t == ev.T_TIME2:
        return time2(v, meta)
    if t == ev.T_TIME:
        return old_time(v)
    if t in (ev.T_ENUM, ev.T_SET):
        return v.to_bytes(meta, "little")
    if t in (ev.T_STRING, ev.T_VARCHAR, ev.T_VAR_STRING):
        return var(v, 1 if meta < 256 else 2)
    if t in (ev.T_BLOB, ev.T_GEOMETRY, ev.T_JSON):
        return var(v, meta)
    raise ValueError(t)


def image(columns: list[tuple[int, int, bool]], values: list) -> bytes:
    """One row image: the NULL bitmap, then every non-NULL value."""
    nulls = bytearray((len(columns) + 7) // 8)
    out = bytearray()
    for i, ((t, meta, unsigned), v) in enumerate(zip(columns, values)):
        if v is None:
            nulls[i // 8] |= 1 << (i % 8)
        else:
            out += value(t, meta, unsigned, v)
    return bytes(nulls) + bytes(out)


def rows_body(columns: list[tuple[int, int, bool]], images: list[bytes], op: str) -> bytes:
    """A rows event body from the column count on (full row images)."""
    width = (len(columns) + 7) // 8
    present = bytes([0xFF] * width)
    mask = len(columns) % 8
    if mask:
        present = present[:-1] + bytes([(1 << mask) - 1])
    head = packed_int(len(columns)) + present + (present if op == "u" else b"")
    return head + b"".join(images)
