"""What each supported torch is expected to get from stridedview: the reader of a tensor's
layout (``_view._torch_layout_reader()``) and of its negative and conjugate bits
(``_view._torch_bits_reader()``), once calibrated.

The tables are the project's claims per torch release, checked by the suite on every torch it
runs with (CI: 2.13.0 and 2.14.1); a torch missing from them fails the tests that ask, so that
a new release is looked at before it is claimed.  Why each entry is what it is:

- 2.9 has no DLPack C exchange API (``__dlpack_c_exchange_api__``): tensors are viewed through
  ``__dlpack__`` capsules ("capsule").
- 2.10 to 2.13 export ``at::toDLPackNonOwning(const at::Tensor &, DLTensor *)``, which the
  direct reader calls once proven against the exchange API ("direct").
- 2.14 added a parameter to that function (its old symbol is gone): the exchange API is used.
- The direct reader needs the C++ exception guard (a build without a C++ compiler has none:
  "exchange api") and Linux (the calibration opens libtorch_cpu.so).
- The bits are read in C ("direct") wherever torch exports ``at::native::is_neg`` and
  ``is_conj`` (every supported release, on Linux); else by the methods.
"""

from __future__ import annotations

import sys

from stridedview import _view

LAYOUT_READERS = {
    (2, 9): "capsule",
    (2, 10): "direct",
    (2, 11): "direct",
    (2, 12): "direct",
    (2, 13): "direct",
    (2, 14): "exchange api",
}


def torch_release(torch) -> tuple[int, int]:
    """``(major, minor)`` of the running torch."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def has_exchange_api(torch) -> bool:
    """Whether this torch offers DLPack 1.3's C exchange API."""
    return hasattr(torch.Tensor, "__dlpack_c_exchange_api__")


def expected_layout_reader(torch) -> str:
    """The layout reader this torch gets on this build and platform."""
    claimed = LAYOUT_READERS[torch_release(torch)]
    if claimed == "direct" and not (sys.platform.startswith("linux") and _view._built_with_cxx_guard):
        return "exchange api"
    return claimed


def expected_bits_reader(torch) -> str:
    """The bits reader this torch gets on this platform."""
    LAYOUT_READERS[torch_release(torch)]  # an unknown torch: KeyError, looked at first
    return "direct" if sys.platform.startswith("linux") else "methods"
