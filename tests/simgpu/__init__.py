"""Tests of the simulated CUDA driver (run them with tests/simgpu/run.sh)."""
