"""The compiled reader of binary-protocol result rows (cdc_sql/_resultrows.c behind
source/result_rows.py), against rows encoded here as the MySQL protocol documents them
("ProtocolBinary::ResultsetRow"), cut into chunks anywhere, as a socket may deliver them."""
import datetime as dt
import io
import struct

import pyarrow as pa
import pymysql
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sql.source import result_rows
from tests.unit.rowimages import packed_int
from tests.unit.test_parquet_splice import bits

pytestmark = pytest.mark.skipif(not result_rows.available(), reason="C decoders not built")

FIELDS = {  # name: (wire type, flags, charset, strategy of its values)
    "ti": (1, 0, 63, st.integers(-2**7, 2**7 - 1)),
    "tu": (1, 32, 63, st.integers(0, 2**8 - 1)),
    "si": (2, 0, 63, st.integers(-2**15, 2**15 - 1)),
    "y": (13, 32, 63, st.integers(1901, 2155)),
    "mi": (9, 0, 63, st.integers(-2**23, 2**23 - 1)),
    "i": (3, 0, 63, st.integers(-2**31, 2**31 - 1)),
    "iu": (3, 32, 63, st.integers(0, 2**32 - 1)),
    "bi": (8, 0, 63, st.integers(-2**63, 2**63 - 1)),
    "bu": (8, 32, 63, st.integers(0, 2**64 - 1)),
    "f": (4, 0, 63, st.floats(width=32, allow_nan=False)),
    "d": (5, 0, 63, st.floats(allow_nan=True)),
    "dt": (10, 128, 63, st.dates()),
    "dtt": (12, 128, 63, st.datetimes()),
    "ts": (7, 128, 63, st.datetimes()),
    "v": (253, 0, 45, st.text()),
    "dec": (246, 0, 63, st.from_regex(r"-?[0-9]{1,30}\.[0-9]{0,10}", fullmatch=True)),
    "b": (252, 128, 63, st.binary()),
    "long": (252, 16, 45, st.text(min_size=251, max_size=70_000).filter(lambda t: len(t) > 250)),
}


def encode_value(type_code: int, flags: int, value) -> bytes:
    """One value as the binary protocol sends it."""
    signed = not flags & 32
    if type_code in (1, 2, 13, 9, 3, 8):
        width = {1: 1, 2: 2, 13: 2, 9: 4, 3: 4, 8: 8}[type_code]
        return value.to_bytes(width, "little", signed=signed)
    if type_code == 4:
        return struct.pack("<f", value)
    if type_code == 5:
        return struct.pack("<d", value)
    if type_code == 10:
        return bytes([4]) + struct.pack("<HBB", value.year, value.month, value.day)
    if type_code in (12, 7):
        parts = struct.pack("<HBB", value.year, value.month, value.day)
        if value.microsecond:
            return bytes([11]) + parts + struct.pack("<BBBI", value.hour, value.minute,
                                                     value.second, value.microsecond)
        if value.hour or value.minute or value.second:
            return bytes([7]) + parts + struct.pack("<BBB", value.hour, value.minute,
                                                    value.second)
        return bytes([4]) + parts
    data = value.encode() if isinstance(value, str) else value
    return packed_int(len(data)) + data  # length-encoded, as in row images


def packets(payloads: list[bytes]) -> bytes:
    """Payloads framed as packets (a payload of 16 MB or more split over several)."""
    out = bytearray()
    for seq, payload in enumerate(payloads):
        while True:
            part, payload = payload[:0xFFFFFF], payload[0xFFFFFF:]
            out += len(part).to_bytes(3, "little") + bytes([seq % 256]) + part
            if len(part) < 0xFFFFFF:
                break
    return bytes(out)


def row_payload(names: list[str], row: list) -> bytes:
    bitmap = bytearray((len(names) + 9) // 8)
    values = bytearray()
    for i, (name, value) in enumerate(zip(names, row)):
        if value is None:
            bitmap[(i + 2) // 8] |= 1 << ((i + 2) % 8)
        else:
            type_code, flags, _, _ = FIELDS[name]
            values += encode_value(type_code, flags, value)
    return b"\x00" + bytes(bitmap) + bytes(values)


EOF_PACKET = b"\xfe\x00\x00\x02\x00"


class Socket:
    """A socket's bytes, delivered in chunks of the given sizes (then the rest)."""

    def __init__(self, data: bytes, sizes: list[int]):
        self.data, self.sizes, self.at = data, list(sizes), 0

    def recv_into(self, buffer, size):
        if size > len(buffer):  # as socket.recv_into
            raise ValueError("buffer too small for requested bytes")
        size = min(self.sizes.pop(0) if self.sizes else len(self.data), size)
        chunk = self.data[self.at:self.at + size]
        buffer[:len(chunk)] = chunk
        self.at += len(chunk)
        return len(chunk)


class Connection:
    """pymysql's connection as the reader sees it: what its buffered reader has read ahead
    (`ahead` bytes), then its socket."""

    def __init__(self, data: bytes, sizes: list[int], ahead: int = 0):
        self._rfile = io.BufferedReader(io.BytesIO(data[:ahead]))
        self._sock = Socket(data[ahead:], sizes)
        self.closed = False

    def _force_close(self):
        self.closed = True


def decoded(names, rows, sizes=(), batch_rows=1000, batch_bytes=1 << 30, end=EOF_PACKET,
            ahead=0):
    fields = [result_rows.arrow_field(FIELDS[n][0], FIELDS[n][1], FIELDS[n][2], n)
              for n in names]
    data = packets([row_payload(names, row) for row in rows] + [end])
    stream = result_rows.Stream(Connection(data, list(sizes), ahead))
    return list(result_rows.batches(stream, fields, batch_rows, batch_bytes)), stream


def expected(name: str, values: list) -> pa.Array:
    type_code, flags, charset, _ = FIELDS[name]
    field = result_rows.arrow_field(type_code, flags, charset, name)
    if field.type == pa.float32():
        return pa.array([None if v is None else struct.unpack("<f", struct.pack("<f", v))[0]
                         for v in values], pa.float32())
    return pa.array(values, field.type)


@st.composite
def tables(draw):
    names = draw(st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=12,
                          unique=True))
    rows = draw(st.lists(st.tuples(*(st.one_of(st.none(), FIELDS[n][3]) for n in names)),
                         max_size=30))
    return names, [list(r) for r in rows]


@settings(max_examples=150, deadline=None)
@given(tables(), st.lists(st.integers(1, 300), max_size=40), st.integers(1, 7),
       st.integers(0, 100))
def test_rows_decode_to_their_values_however_the_bytes_arrive(table, sizes, batch_rows, ahead):
    names, rows = table
    batches, stream = decoded(names, rows, sizes, batch_rows=batch_rows, ahead=ahead)
    assert stream.ended
    assert [b.num_rows for b in batches] == \
        [min(batch_rows, len(rows) - i) for i in range(0, len(rows), batch_rows)]
    got = pa.Table.from_batches(batches, schema=pa.schema(
        [(n, result_rows.arrow_field(*FIELDS[n][:3], n).type) for n in names]))
    want = pa.table([expected(name, [row[i] for row in rows]) for i, name in enumerate(names)],
                    names=names)
    assert got.schema == want.schema
    assert bits(got).equals(bits(want))  # floats by their bits (NaN payloads, -0.0)


def test_a_batch_ends_past_its_bytes_of_values():
    rows = [["x" * 100] for _ in range(10)]
    batches, _ = decoded(["v"], rows, batch_bytes=250)
    assert [b.num_rows for b in batches] == [3, 3, 3, 1]


def test_a_row_of_several_packets_is_put_together():
    """A row of 16 MB or more comes in packets of 16 MB - 1 bytes and a last, shorter one."""
    text = "ab" * (9 * 2**20)  # 18 MB
    batches, stream = decoded(["i", "long", "v"], [[1, "c", "d"], [2, text, "e"], [3, None, "f"]],
                              sizes=[1000, 5000])
    table = pa.Table.from_batches(batches)
    assert table["long"].to_pylist() == ["c", text, None]
    assert table["v"].to_pylist() == ["d", "e", "f"] and table["i"].to_pylist() == [1, 2, 3]


def test_an_error_packet_raises_the_server_s_error():
    error = b"\xff" + (1317).to_bytes(2, "little") + b"#70100Query execution was interrupted"
    with pytest.raises(pymysql.err.OperationalError) as info:
        decoded(["i"], [[1], [2]], end=error)
    assert info.value.args[0] == 1317


def test_a_connection_that_ends_mid_row_is_lost():
    data = packets([row_payload(["v"], ["abcdef"])])[:-2]
    stream = result_rows.Stream(Connection(data, []))
    fields = [result_rows.arrow_field(*FIELDS["v"][:3], "v")]
    with pytest.raises(pymysql.err.OperationalError) as info:
        list(result_rows.batches(stream, fields, 10, 1 << 20))
    assert info.value.args[0] == 2013 and stream.conn.closed


@pytest.mark.parametrize("payload, message", [
    (b"\x00\x00" + b"\x05ab", "ends inside its columns"),
    (b"\x00\x00" + b"\x02ab" + b"z", "holds 1 more"),
])
def test_a_row_that_does_not_fit_its_columns_fails(payload, message):
    stream = result_rows.Stream(Connection(packets([payload, EOF_PACKET]), []))
    fields = [result_rows.arrow_field(*FIELDS["v"][:3], "v")]
    with pytest.raises(result_rows.Failed, match=message):
        list(result_rows.batches(stream, fields, 10, 1 << 20))


def test_a_packet_that_is_neither_row_end_nor_error_fails():
    """Only a row (0x00), the result set's EOF (0xFE) or an error (0xFF) may come: anything
    else is not taken for the end (rows after it would be lost)."""
    stream = result_rows.Stream(Connection(packets([b"\x00\x00\x01a", b"\x03xyz"]), []))
    fields = [result_rows.arrow_field(*FIELDS["v"][:3], "v")]
    with pytest.raises(result_rows.Failed, match="a packet of 4 bytes where a row was due"):
        list(result_rows.batches(stream, fields, 10, 1 << 20))
    from cdc_sql import _resultrows
    with pytest.raises(ValueError, match="start past"):
        _resultrows.Rows([(4, 0)]).decode(b"1234", 5, 10, 10)


def test_text_that_is_not_utf8_fails():
    stream = result_rows.Stream(Connection(packets([b"\x00\x00\x02\xff\xfe", EOF_PACKET]), []))
    fields = [result_rows.arrow_field(*FIELDS["v"][:3], "v")]
    with pytest.raises(result_rows.Failed, match="column v: text that is not UTF-8"):
        list(result_rows.batches(stream, fields, 10, 1 << 20))


def test_a_zero_date_fails():
    stream = result_rows.Stream(Connection(packets([b"\x00\x00\x00", EOF_PACKET]), []))
    fields = [result_rows.arrow_field(*FIELDS["dtt"][:3], "dtt")]
    with pytest.raises(result_rows.Failed, match="zero date"):
        list(result_rows.batches(stream, fields, 10, 1 << 20))


def test_field_types_follow_the_column_definitions():
    field = result_rows.arrow_field
    assert field(8, 32, 63, "x").type == pa.uint64() and field(8, 0, 63, "x").type == pa.int64()
    assert field(246, 0, 63, "x").type == pa.string()  # DECIMAL digits, charset binary
    assert field(254, 0, 63, "x").type == pa.binary() and field(254, 0, 45, "x").type == pa.string()
    assert field(7, 0, 63, "x").type == pa.timestamp("us") and field(10, 0, 63, "x").type == pa.date32()
    with pytest.raises(result_rows.Failed, match="not read"):
        field(11, 0, 63, "x")  # TIME: the snapshot's SELECT casts it to text
    assert dt.date(1970, 1, 2) == pa.array([1], pa.date32()).to_pylist()[0]
