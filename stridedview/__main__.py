"""``python -m stridedview``: show the version and a view of a numpy array.

A later release grows this into the interop report (which array libraries can
hand arrays to which through stridedview).
"""

import sys


def main() -> int:
    import numpy

    import stridedview
    from stridedview import StridedMemoryView

    print(f"stridedview {stridedview.__version__} (numpy {numpy.__version__})")
    array = numpy.arange(12, dtype=numpy.float32).reshape(4, 3)[:, ::2]
    view = StridedMemoryView(array)
    print("numpy.arange(12, dtype=float32).reshape(4, 3)[:, ::2] viewed through DLPack:")
    print(f"  {view!r}")
    print(f"  strides in elements: {view.strides}; numpy's, in bytes: {array.strides}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
