"""Builds libsdpa with CMake and installs it inside the sdpa package.

    pip install .                                   # CPU backend (+ CUDA if nvcc is found)
    pip wheel .                                     # the same, as a manylinux wheel
    SDPA_CMAKE_ARGS="-DSDPA_CUDA=ON -DSDPA_CUDA_ARCHS=90a" pip install .
    SDPA_LIBRARY_PREBUILT=/path/libsdpa.so pip install .  # no build: ship this file

Metadata lives in pyproject.toml; this file only adds the CMake step (no compile
step of its own: the binding is ctypes). The build folder is build-wheel/ at the
repository root ($SDPA_BUILD_DIR overrides), kept apart from a developer's build/.

The library a wheel carries runs on a machine with only the C library: no
OpenBLAS (the CPU backend's plain-C tile products; SDPA_CMAKE_ARGS=-DSDPA_BLAS=ON
brings it back), libstdc++ and libgcc linked in and hidden, the CUDA runtime
static (the GPU needs only its driver). The wheel is tagged py3-none (ctypes:
any Python 3) and manylinux_2_<N> from the newest glibc symbol version the
library uses.
"""
import os
import platform
import re
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
            "-DCMAKE_BUILD_TYPE=Release", "-DSDPA_BLAS=OFF",
            "-DCMAKE_SHARED_LINKER_FLAGS=-static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL"]
    args += os.environ.get("SDPA_CMAKE_ARGS", "").split()  # later -D's win
    subprocess.check_call(args)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
    subprocess.check_call([cmake, "--build", bdir, "--target", "sdpa_shared", "-j", jobs])
    for name in ("libsdpa.so", "libsdpa.dylib"):
        p = os.path.join(bdir, name)
        if os.path.exists(p):
            return os.path.realpath(p)  # the versioned file behind the symlinks
    sys.exit("sdpa: the CMake build produced no libsdpa.so in %s" % bdir)


_BUILT = {}


def _glibc_minor(path):
    """The newest GLIBC_2.<N> symbol version the library names, or None."""
    with open(path, "rb") as f:
        found = re.findall(rb"GLIBC_2\.(\d+)", f.read())
    return max(int(x) for x in found) if found else None


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        lib = _build_libsdpa()
        _BUILT["lib"] = lib
        ext = ".dylib" if lib.endswith(".dylib") or ".dylib" in lib else ".so"
        dst_dir = os.path.join(self.build_lib, "sdpa")
        os.makedirs(dst_dir, exist_ok=True)
        shutil.copyfile(lib, os.path.join(dst_dir, "libsdpa" + ext))


try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel


class ManylinuxWheel(bdist_wheel):
    def get_tag(self):
        _, _, plat = super().get_tag()
        lib = _BUILT.get("lib")
        minor = _glibc_minor(lib) if lib and plat.startswith("linux_") else None
        if minor is not None:
            plat = "manylinux_2_%d_%s" % (minor, platform.machine())
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    """The wheel carries a native library: platform-specific, not pure."""

    def has_ext_modules(self):
        return True


# setuptools' own scratch (build/, *.egg-info) goes under build-wheel/ too, away
# from the CMake build/ folder and out of the source tree
_SCRATCH = os.path.join("build-wheel", "setuptools")
os.makedirs(os.path.join(ROOT, _SCRATCH), exist_ok=True)

setup(cmdclass={"build_py": BuildPyWithLib, "bdist_wheel": ManylinuxWheel},
      distclass=BinaryDistribution,
      options={"build": {"build_base": _SCRATCH}, "egg_info": {"egg_base": _SCRATCH}})
