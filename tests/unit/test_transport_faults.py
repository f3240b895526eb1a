"""A test that met Sail's Spark Connect stream breaking runs once more; nothing else does."""
from __future__ import annotations

import textwrap

import pytest

from tests.transport_faults import RERUN, transport_fault

pytest_plugins = ["pytester"]

FAULT = ("pyspark.errors.exceptions.connect.IllegalArgumentException: invalid argument: "
         "operation not found: 054d421f-39fa-4e82-92f3-189df99b29c2")


@pytest.mark.parametrize("line", [
    FAULT,
    "  | \tdetails = \"internal error: task context not found for operation\"",
    "google.protobuf.message.DecodeError: Error parsing message with type "
    "'spark.connect.ExecutePlanResponse': Wire format was corrupt",
])
def test_the_fault_is_named_by_its_line(line):
    assert transport_fault(f"Traceback (most recent call last):\n{line}\nmore") == line.strip()


@pytest.mark.parametrize("text", [
    "AssertionError: assert 1 == 2",
    "KeyError: 'operation not found'",  # not Sail's wording
    "IllegalArgumentException: invalid argument: table not found: t",
])
def test_other_failures_are_not_the_fault(text):
    assert transport_fault(text) is None


def test_only_the_fault_runs_again_and_only_once(pytester):
    pytester.makeconftest('pytest_plugins = ["tests.transport_faults"]')
    pytester.makepyfile(textwrap.dedent(f'''
        import itertools
        calls = {{name: itertools.count() for name in ("once", "twice", "other")}}
        FAULT = {FAULT!r}

        def test_fault_once():
            if next(calls["once"]) == 0:
                raise RuntimeError(FAULT)

        def test_fault_twice():
            next(calls["twice"])
            raise RuntimeError(FAULT)

        def test_other_failure():
            assert next(calls["other"]) == 1

        def test_counts():
            assert [next(c) for c in calls.values()] == [2, 2, 1]
    '''))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([f"*{RERUN}*", "*::test_fault_once: *operation not found*",
                                 "*::test_fault_twice: *operation not found*"])
    assert "test_other_failure: " not in result.stdout.str()
