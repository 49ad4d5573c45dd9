"""The 30-second tour: view a host array, read what a kernel launcher needs.

Runs on any machine (no GPU): ``python examples/quick_start.py``.
"""

import numpy as np

from stridedview import StridedMemoryView

# Every other column of a 4 x 3 float32 matrix: strided, not contiguous.
a = np.arange(12, dtype=np.float32).reshape(4, 3)[:, ::2]

view = StridedMemoryView(a)  # host memory: no stream to name
assert view.ptr == a.ctypes.data  # the address of a[0, 0]
print("ptr", hex(view.ptr), "(the address of a[0, 0])")
print("shape", view.shape, "strides (elements)", view.strides,
      "numpy's (bytes)", a.strides)
print("dtype", view.dtype, "device_id", view.device_id,
      "readonly", view.readonly)
print("C-contiguous?", view.is_c_contiguous, "bytes of data", view.nbytes)

# The view keeps the array alive, and hands it on without copying:
b = np.from_dlpack(view)
assert b.ctypes.data == a.ctypes.data and (b == a).all()
print("numpy.from_dlpack(view) shares the memory:", np.shares_memory(a, b))
