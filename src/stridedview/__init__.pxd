# `from stridedview cimport StridedMemoryView` in a Cython extension: see _view.pxd.

from stridedview._view cimport StridedMemoryView
