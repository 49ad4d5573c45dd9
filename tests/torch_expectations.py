"""What each supported torch is expected to get from stridedview: the reader of a tensor's
layout (``_view._torch_layout_reader()``) and of its negative and conjugate bits
(``_view._torch_bits_reader()``), once calibrated.

The tables are the project's claims per torch release, checked by the suite on every torch it
runs with (CI: 2.13.0 and 2.14.1); a torch missing from them fails the tests that ask, so that
a new release is looked at before it is claimed.  Why each entry is what it is:

- 2.9 has no DLPack C exchange API (``__dlpack_c_exchange_api__``): tensors are viewed through
  ``__dlpack__`` capsules ("capsule").
- 2.10 to 2.14 have the exchange API and export torch's stable C ABI (the ``aoti_torch_get_*``
  functions of ``torch/csrc/inductor/aoti_torch/c/shim.h``), which the "stable abi" reader calls
  on the tensor's at::Tensor once proven against the exchange API.  It needs no C++ guard (the
  functions catch their own exceptions), so a build without a C++ compiler gets it too; it needs
  Linux (the calibration opens libtorch_cpu.so) and the bits' calibration (the offset).
- The private ``at::toDLPackNonOwning`` ("direct") is only a second choice where the stable ABI
  fails its calibration: no supported release gets it (2.14 changed its signature anyway).
- The bits are read in C ("direct") wherever torch exports ``at::native::is_neg`` and
  ``is_conj`` (every supported release, on Linux); else by the methods.
"""

from __future__ import annotations

import sys

from stridedview import _view

LAYOUT_READERS = {
    (2, 9): "capsule",
    (2, 10): "stable abi",
    (2, 11): "stable abi",
    (2, 12): "stable abi",
    (2, 13): "stable abi",
    (2, 14): "stable abi",
}


# The fields reader (c10::TensorImpl's fields read in C, _torch_bits.pxi) on 64-bit Linux:
# proven by its calibration on the releases CI runs; None where not yet checked (either).
FIELDS_READERS = {
    (2, 9): "off",  # no exchange API, no stable-ABI reader to stand on
    (2, 10): None,
    (2, 11): None,
    (2, 12): None,
    (2, 13): "fields",
    (2, 14): "fields",
}


# The fields reader's data pointer read from the tensor's StorageImpl (_torch_bits.pxi's
# _read_storage_data), wherever the fields reader is in use: proven by its calibration on the
# releases CI runs; None where not yet checked (either).
STORAGE_READERS = {
    (2, 9): "getter",
    (2, 10): None,
    (2, 11): None,
    (2, 12): None,
    (2, 13): "storage",
    (2, 14): "storage",
}


# The TorchFunctionMode check read from torch's thread-local PythonTorchFunctionTLS
# (_torch_bits.pxi's _calibrate_torch_mode_state) wherever the bits are read directly:
# proven by its calibration on the releases CI runs; None where not yet checked (either).
MODE_READERS = {
    (2, 9): None,
    (2, 10): None,
    (2, 11): None,
    (2, 12): None,
    (2, 13): "state",
    (2, 14): "state",
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
    if claimed == "stable abi" and not sys.platform.startswith("linux"):
        return "exchange api"
    return claimed


def expected_bits_reader(torch) -> str:
    """The bits reader this torch gets on this platform."""
    LAYOUT_READERS[torch_release(torch)]  # an unknown torch: KeyError, looked at first
    return "direct" if sys.platform.startswith("linux") else "methods"


def expected_fields_readers(torch) -> tuple[str, ...]:
    """The fields reader states this torch may have on this build and platform."""
    claimed = FIELDS_READERS[torch_release(torch)]
    if expected_layout_reader(torch) != "stable abi" or sys.maxsize < 2**32:
        return ("off",)
    return ("fields", "off") if claimed is None else (claimed,)


def expected_storage_readers(torch) -> tuple[str, ...]:
    """The data pointer's reader states this torch may have on this build and platform."""
    claimed = STORAGE_READERS[torch_release(torch)]
    if expected_fields_readers(torch) != ("fields",):
        return ("getter",) if expected_fields_readers(torch) == ("off",) else ("storage", "getter")
    return ("storage", "getter") if claimed is None else (claimed,)


def expected_mode_readers(torch) -> tuple[str, ...]:
    """The TorchFunctionMode check's states this torch may have on this platform."""
    claimed = MODE_READERS[torch_release(torch)]
    if expected_bits_reader(torch) != "direct":
        return ("uncalibrated", "function")
    return ("state", "function") if claimed is None else (claimed,)


def expected_offset_proof(torch) -> str:
    """How the at::Tensor offset is proven on this torch (``_view._torch_offset_proof()``):
    also against ``torch_tensor_from_pyobject`` (the stable C shim's supported route from a
    Python tensor, exported from 2.14 on) where it exists, by the methods alone before."""
    LAYOUT_READERS[torch_release(torch)]  # an unknown torch: KeyError, looked at first
    if not sys.platform.startswith("linux"):
        return "none"
    return "shim" if torch_release(torch) >= (2, 14) else "probes"
