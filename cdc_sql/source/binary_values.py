"""MySQL's binary forms of values, as the binlog carries them, into contract values: DECIMAL,
DATETIME2, TIMESTAMP2, TIME2, and the text MariaDB shows for INET6, UUID and MySQL's binary JSON.
Pure functions, the reference for the compiled decoder's (cdc_sql/_rowdecode.c)."""
from __future__ import annotations

import decimal
import ipaddress
import json

WIDE = decimal.Context(prec=100)  # DECIMAL(65,30) needs more than the default 28 digits
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def json_text(raw: bytes) -> str:
    """MySQL's binary JSON, as MySQL prints it."""
    # only MySQL sources have binary JSON; MariaDB's JSON is text
    from pymysqlreplication.json_binary import parse_json

    def plain(value):
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    if not raw:
        return "null"
    return json.dumps(plain(parse_json(raw[:1][0], raw[1:]) if len(raw) > 1 else None),
                      separators=(", ", ": "), ensure_ascii=False)


def inet6_text(raw: bytes) -> str:
    """As MariaDB shows an INET6 (IPv4-mapped and -compatible addresses in dotted form)."""
    address = ipaddress.IPv6Address(raw)
    mapped = address.ipv4_mapped
    if mapped is not None:
        return f"::ffff:{mapped}"
    if raw[:12] == bytes(12) and raw[12:] not in (bytes(4), b"\0\0\0\1"):
        return f"::{ipaddress.IPv4Address(raw[12:])}"
    return address.compressed


def uuid_text(raw: bytes) -> str:
    """MariaDB stores a UUID with its time fields swapped (versions 1-5 of RFC 4122 variant)."""
    h = raw.hex()
    if raw[6] >> 4 in range(1, 6) and raw[8] >> 6 == 2:
        pass  # stored as shown
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def date_parts(data: bytes, p: int) -> tuple:
    n = data[p] | data[p + 1] << 8 | data[p + 2] << 16
    return (n >> 9, n >> 5 & 15, n & 31, 0, 0, 0, 0)


def datetime2_parts(raw: bytes, fsp: int) -> tuple:
    """DATETIME(fsp) in its binary form: (year, month, day, hour, minute, second, micros)."""
    intpart = int.from_bytes(raw[:5], "big") - 0x8000000000
    micros = fraction_micros(raw[5:], fsp, signed=True)
    ymd, hms = intpart >> 17, intpart % (1 << 17)
    ym = ymd >> 5
    return (ym // 13, ym % 13, ymd % 32, hms >> 12, hms >> 6 & 63, hms & 63, micros)


def timestamp2_parts(raw: bytes, fsp: int) -> tuple[int, int]:
    """TIMESTAMP(fsp): (epoch seconds, micros)."""
    return int.from_bytes(raw[:4], "big"), fraction_micros(raw[4:], fsp, signed=False)


def fraction_micros(raw: bytes, fsp: int, signed: bool) -> int:
    if not fsp:
        return 0
    value = int.from_bytes(raw, "big", signed=signed)
    return value * (10_000, 100, 1)[(fsp - 1) // 2]


def time2_micros(raw: bytes, fsp: int) -> int:
    """TIME(fsp) in microseconds, as MySQL's my_time_packed_from_binary reads it (negative
    values with a fraction borrow from the seconds)."""
    data = int.from_bytes(raw, "big")
    if fsp >= 5:
        packed = data - 0x800000000000
    else:
        frac_bits = 8 * ((fsp + 1) // 2)
        intpart, frac = (data >> frac_bits) - 0x800000, data & ((1 << frac_bits) - 1)
        if intpart < 0 and frac:
            intpart, frac = intpart + 1, frac - (1 << frac_bits)
        packed = (intpart << 24) + frac * (10_000 if fsp <= 2 else 100) if fsp else intpart << 24
    hms, micros = divmod(abs(packed), 1 << 24)
    total = (((hms >> 12) % 1024) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63)) * 1_000_000 + micros
    return -total if packed < 0 else total


def time_text(micros: int, fsp: int) -> str:
    """'[-]HH:MM:SS[.ffffff]' with at least two hour digits and the column's fraction digits."""
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}"[: fsp + 1] if fsp else "")


def decimal_size(precision: int, scale: int) -> int:
    intg, frac = precision - scale, scale
    return intg // 9 * 4 + _DIG2BYTES[intg % 9] + frac // 9 * 4 + _DIG2BYTES[frac % 9]


def decimal_from_binary(raw: bytes, precision: int, scale: int) -> decimal.Decimal:
    """MySQL's binary DECIMAL: groups of nine digits in four big-endian bytes (fewer bytes for
    the leading and trailing partial groups), the sign in the top bit, negatives inverted."""
    data = bytearray(raw)
    negative = not data[0] & 0x80
    data[0] ^= 0x80
    if negative:
        data = bytearray(b ^ 0xFF for b in data)
    intg, frac = precision - scale, scale
    p = 0
    parts = []
    lead = _DIG2BYTES[intg % 9]
    if lead:
        parts.append(str(int.from_bytes(data[p:p + lead], "big")))
        p += lead
    for _ in range(intg // 9):
        parts.append(f"{int.from_bytes(data[p:p + 4], 'big'):09d}")
        p += 4
    fraction = []
    for _ in range(frac // 9):
        fraction.append(f"{int.from_bytes(data[p:p + 4], 'big'):09d}")
        p += 4
    tail = _DIG2BYTES[frac % 9]
    if tail:
        fraction.append(f"{int.from_bytes(data[p:p + tail], 'big'):0{frac % 9}d}")
    text = ("".join(parts) or "0") + ("." + "".join(fraction) if fraction else "")
    value = decimal.Decimal(("-" if negative else "") + text, context=WIDE)
    return value
