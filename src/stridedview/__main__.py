"""``python -m stridedview``: the interop report (see stridedview._report)."""

import sys

from stridedview._report import main

if __name__ == "__main__":
    sys.exit(main())
