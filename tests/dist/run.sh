#!/bin/sh
# run.sh - the distributed tests on a machine with 2 or more GPUs, one command:
#
#   tests/dist/run.sh [build-dir]     (default: build-gpu)
#
# Configures the build directory if it is not yet (the CUDA backend, the ring
# required), builds it, runs the C tests labelled dist (2 and 4 ranks, the
# example; each is skipped where fewer GPUs are visible) and the Python ones
# (tests/python/test_distributed.py, with the library just built).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DSDPA_CUDA=ON -DSDPA_RING=ON -DSDPA_CUDA_ARCHS=90a-real
fi
cmake --build "$build" -j "$(nproc)"
status=0
ctest --test-dir "$build" -L dist --output-on-failure || status=1
SDPA_LIBRARY="$build/libsdpa.so" python3 -m pytest -q -p no:cacheprovider -rs \
  "$root/tests/python/test_distributed.py" || status=1
exit $status
