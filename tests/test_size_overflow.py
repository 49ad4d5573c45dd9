"""The checked int64 helpers of the C core (sv_mul_i64, sv_add_i64): the builtins gcc and
clang give, and the portable forms other compilers get, agree with exact integers; the
byte-offset check built on them is exact at int64's limits.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stridedview import _view

INT64_MAX = 2**63 - 1


def _exact(value):
    return value if -(2**63) <= value <= INT64_MAX else None


int64s = st.one_of(
    st.integers(-(2**63), INT64_MAX),
    st.integers(-(2**32), 2**32),
    st.sampled_from([0, 1, -1, 2, -2, 2**31, 2**32, 2**62, -(2**62), INT64_MAX, -INT64_MAX, -(2**63)]),
)


@settings(max_examples=3000, deadline=None)
@given(a=int64s, b=int64s)
def test_checked_int64_helpers_agree_with_exact_integers(a, b):
    """sv_mul_i64 and sv_add_i64 (the builtins here) and their portable forms (other
    compilers') give the exact product and sum, or report the overflow."""
    expected = (_exact(a * b), _exact(a + b))
    fast, portable = _view._checked_int64_both_ways(a, b)
    assert fast == expected and portable == expected, (a, b, fast, portable)


@pytest.mark.parametrize("extents, strides, itemsize, fits", [
    ((2,), (-(2**63),), 1, False),  # one step of -2**63 bytes
    ((2, 2), (-(2**62), -(2**62)), 1, False),  # two of -2**62: -2**63 together
    ((2, 2), (-(2**62), -(2**62) + 1), 1, True),
    ((1, 3), (-(2**63), 1), 8, True),  # an extent-1 axis never steps
    ((3,), (2**62 - 1,), 2, False),
    ((2**60,), None, 8, True),  # row-major: the last element 2**63 - 8 bytes away
    ((2**60 + 1,), None, 8, False),
])
def test_byte_offsets_portable_form_at_the_limits(extents, strides, itemsize, fits):
    """The portable byte-offset check (now on the checked helpers) at int64's edges, the most
    negative stride included, agrees with the 128-bit one."""
    fast, portable = _view._byte_offsets_fit_both_ways(extents, strides, itemsize)
    assert portable == fits and fast in (-1, fits)
