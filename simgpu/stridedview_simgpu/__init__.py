"""stridedview-simgpu: a simulated CUDA device behind the driver's C ABI, for testing kernel
launchers on machines with no GPU.

Its ``libcuda.so.1`` (built from C at install, with nothing but the C compiler) is the
driver for cuda-bindings, cuda.core and numba-cuda, unchanged, in a process started with it
(a driver is chosen when a process first loads one, so importing this package changes no
driver):

- ``simgpu-run COMMAND ...``: any program or test suite on it;
- ``pytest --simgpu``: a test run on it, with fixtures (``simgpu``) and the ``needs_gpu``
  marker (the pytest plugin, :mod:`stridedview_simgpu.pytest_plugin`);
- :mod:`stridedview_simgpu.kernels`: host implementations of kernels, run in stream order;
- :func:`simulator`: what a test can ask the simulator (counters, the launch log, injected
  failures, the per-operation delay, the stream-order checker's reports), None on a real driver.
"""

from ._control import Call, Simulator, simulator
from ._library import SimulatorNotBuilt, environment, library_dir, runs_on_simulator

__all__ = ["Call", "Simulator", "SimulatorNotBuilt", "environment", "library_dir", "runs_on_simulator", "simulator"]
__version__ = "0.1.0"
