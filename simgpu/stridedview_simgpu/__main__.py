"""``python -m stridedview_simgpu COMMAND [ARGS...]``: the same as ``simgpu-run``."""

import sys

from ._run import main

sys.exit(main())
