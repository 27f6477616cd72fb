"""Builds libsdpa with CMake and installs it inside the sdpa package.

    pip install .                                   # CPU backend (+ CUDA if nvcc is found)
    SDPA_CMAKE_ARGS="-DSDPA_CUDA=ON -DSDPA_CUDA_ARCHS=90a" pip install .
    SDPA_LIBRARY_PREBUILT=/path/libsdpa.so pip install .  # no build: ship this file

Metadata lives in pyproject.toml; this file only adds the CMake step (no compile
step of its own: the binding is ctypes). The build folder is build-wheel/ at the
repository root ($SDPA_BUILD_DIR overrides), kept apart from a developer's build/.
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def _build_libsdpa():
    pre = os.environ.get("SDPA_LIBRARY_PREBUILT")
    if pre:
        return os.path.realpath(pre)
    cmake = shutil.which("cmake")
    if not cmake:
        sys.exit("sdpa: cmake not found on PATH (needed to build libsdpa)")
    bdir = os.environ.get("SDPA_BUILD_DIR") or os.path.join(ROOT, "build-wheel")
    args = [cmake, "-S", ROOT, "-B", bdir, "-DSDPA_BUILD_TESTS=OFF",
            "-DCMAKE_BUILD_TYPE=Release"]
    args += os.environ.get("SDPA_CMAKE_ARGS", "").split()
    subprocess.check_call(args)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
    subprocess.check_call([cmake, "--build", bdir, "--target", "sdpa_shared", "-j", jobs])
    for name in ("libsdpa.so", "libsdpa.dylib"):
        p = os.path.join(bdir, name)
        if os.path.exists(p):
            return os.path.realpath(p)  # the versioned file behind the symlinks
    sys.exit("sdpa: the CMake build produced no libsdpa.so in %s" % bdir)


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        lib = _build_libsdpa()
        ext = ".dylib" if lib.endswith(".dylib") or ".dylib" in lib else ".so"
        dst_dir = os.path.join(self.build_lib, "sdpa")
        os.makedirs(dst_dir, exist_ok=True)
        shutil.copyfile(lib, os.path.join(dst_dir, "libsdpa" + ext))


class BinaryDistribution(Distribution):
    """The wheel carries a native library: platform-specific, not pure."""

    def has_ext_modules(self):
        return True


# setuptools' own scratch (build/, *.egg-info) goes under build-wheel/ too, away
# from the CMake build/ folder and out of the source tree
_SCRATCH = os.path.join("build-wheel", "setuptools")
os.makedirs(os.path.join(ROOT, _SCRATCH), exist_ok=True)

setup(cmdclass={"build_py": BuildPyWithLib}, distclass=BinaryDistribution,
      options={"build": {"build_base": _SCRATCH}, "egg_info": {"egg_base": _SCRATCH}})
