"""Bucket summaries agree: counts and row hashes exactly, float sums within rounding error."""
from cdc_sql.ops.checksum import same


def test_counts_and_hashes_must_match():
    assert same((3, 77), (3, 77))
    assert not same((3, 77), (3, 78)) and not same((3, 77), (2, 77))


def test_float_sums_within_the_rounding_error_of_another_order():
    assert same((2, 7, 2, 0.30000000000000004, 0.3), (2, 7, 2, 0.3, 0.3))
    assert not same((2, 7, 2, 0.3, 0.3), (2, 7, 2, 0.31, 0.31))
    assert not same((2, 7, 2, 0.3, 0.3), (2, 7, 1, 0.3, 0.3))


def test_overflowing_sums_compare_by_count_only():
    # DOUBLE max and min in one bucket: MariaDB reports SUM(ABS()) as 0, Spark as inf
    assert same((9, 5, 9, 5e-324, 0.0), (9, 5, 9, 1e-323, float("inf")))
