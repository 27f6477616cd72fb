"""The check of a ctypes mirror against its C header, shared by test_cpu.py (sdpa.h)
and test_distributed.py (sdpa_ring.h): a small C program compiled against the
header prints every size and field offset, which must equal ctypes'."""
import ctypes
import os
import shutil
import subprocess
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def assert_abi_layout(header_name, structs):
    """Every size and field offset of structs equals the C compiler's for
    include/<header_name>; skips without a C compiler or the header."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    header = os.path.join(REPO, "include", header_name)
    if not cc or not os.path.exists(header):
        pytest.skip("no C compiler or no header")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "%s"' % header_name,
             "int main(void) {"]
    want = []
    for s in structs:
        lines.append('printf("%%zu\\n", sizeof(%s));' % s.__name__)
        want.append(ctypes.sizeof(s))
        for f, _ in s._fields_:
            lines.append('printf("%%zu\\n", offsetof(%s, %s));' % (s.__name__, f))
            want.append(getattr(s, f).offset)
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as t:
        src, exe = os.path.join(t, "abi.c"), os.path.join(t, "abi")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        subprocess.run([cc, "-I", os.path.dirname(header), src, "-o", exe], check=True)
        got = [int(x) for x in subprocess.run([exe], capture_output=True, text=True,
                                              check=True).stdout.split()]
    assert got == want
