"""Measures the library's size and build time and writes
bench/results/<date>-<host>-build.json (docs/performance.md's size table):

    python3 bench/build_record.py [--archs "80;90a-real"] [--jobs N] [--wheel] [--host NAME]

Builds a fresh CMake folder as the README's first command does (configure, then
`cmake --build -j N`, tests included), times it, and records libsdpa.so's size;
with --wheel also `pip wheel .` (its own fresh build) and the wheel's size. Run
it on an otherwise idle machine: the time is wall-clock."""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd, **kw):
    t = time.time()
    subprocess.check_call(cmd, **kw)
    return round(time.time() - t, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archs", default="80;90a-real")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--wheel", action="store_true")
    ap.add_argument("--host", default=f"cpu{os.cpu_count()}")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sdpa-build-")
    bdir = os.path.join(tmp, "build")
    rec = {"archs": args.archs, "cores": os.cpu_count(), "jobs": args.jobs}
    rec["build_seconds"] = timed(["cmake", "-S", ROOT, "-B", bdir, f"-DSDPA_CUDA_ARCHS={args.archs}"],
                                 stdout=subprocess.DEVNULL) + \
        timed(["cmake", "--build", bdir, "-j", str(args.jobs)], stdout=subprocess.DEVNULL)
    lib = os.path.realpath(os.path.join(bdir, "libsdpa.so"))
    rec["libsdpa_so_bytes"] = os.path.getsize(lib)
    if args.wheel:
        wdir = os.path.join(tmp, "wheel")
        env = dict(os.environ, SDPA_BUILD_DIR=os.path.join(tmp, "build-wheel"),
                   SDPA_CMAKE_ARGS=f"-DSDPA_CUDA_ARCHS={args.archs}")
        rec["wheel_seconds"] = timed([sys.executable, "-m", "pip", "wheel", ROOT, "-w", wdir,
                                      "--no-deps", "-q"], env=env)
        whl = glob.glob(os.path.join(wdir, "*.whl"))[0]
        rec["wheel"] = os.path.basename(whl)
        rec["wheel_bytes"] = os.path.getsize(whl)
    shutil.rmtree(tmp, ignore_errors=True)
    out = common.write_results(args.host, [rec], suffix="-build",
                               extra={"command": "python3 bench/build_record.py " +
                                      " ".join(sys.argv[1:])})
    with open(out) as f:
        print(f.read())
    print("wrote", out)


if __name__ == "__main__":
    main()
