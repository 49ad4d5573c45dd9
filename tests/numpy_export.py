"""What the installed numpy's own DLPack export does with strides that address nothing.

numpy 2.4 and later export an array's own strides.  numpy 2.0 to 2.3 (all that Python 3.10
has) export contiguous strides instead for axes of extent 1 and for empty arrays; such a
stride addresses no other element, so both describe the same memory.  The view's numpy
adapter gives the array's own strides on every numpy 2, so where the tests compare the
adapter with numpy's capsule they compare the strides that address memory, and only on a
numpy that rewrites the others.
"""

from __future__ import annotations

import numpy as np


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


NUMPY_REWRITES_DEGENERATE_STRIDES = (2, 0) <= _version(np.__version__) < (2, 4)


def addressing_strides(shape, strides):
    """``strides`` as compared with numpy's capsule, and with views: None for an empty layout,
    whose strides address nothing (a view's are all 0, a producer's anything); on numpy 2.0 to
    2.3 also None in place of the stride of each axis of extent 1 (strides that address no
    other element); otherwise unchanged."""
    if strides is not None and 0 in shape:
        return None
    if not NUMPY_REWRITES_DEGENERATE_STRIDES or strides is None:
        return strides
    return tuple(None if extent == 1 else stride for extent, stride in zip(shape, strides))
