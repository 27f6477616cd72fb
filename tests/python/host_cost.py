"""Host cost of the Python binding per call, without a GPU (issue 4): the
library's sdpa_fwd / sdpa_bwd are swapped for a C stub that returns SDPA_OK at
once, so what is timed is the binding alone (descriptor, array adaptation, the
ctypes call) on tiny CPU arrays: numpy, and torch with its front ends when torch
imports. Not a test (nothing asserted); best of 7 runs of n calls, us a call.

  SDPA_LIBRARY=build/libsdpa.so PYTHONPATH=python python3 tests/python/host_cost.py [n]
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import sdpa
from sdpa import _lib


def per_call(fn, n):
    fn()
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t) / n / 1e3)
    return best


def stub_library(folder):
    src, so = os.path.join(folder, "stub.c"), os.path.join(folder, "libstub.so")
    with open(src, "w") as f:
        f.write("int stub(const void *desc) { (void)desc; return 0; }\n")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", so, src],
                   check=True)
    return ctypes.CDLL(so)


class Stubbed:
    """with Stubbed(stub): sdpa_fwd / sdpa_bwd return SDPA_OK without running."""

    def __init__(self, stub):
        self.L, self.stub = _lib.lib(), stub

    def __enter__(self):
        self.real = {n: getattr(self.L, n) for n in ("sdpa_fwd", "sdpa_bwd")}
        for n, f in self.real.items():
            s = self.stub["stub"]  # a new function object each time
            s.restype, s.argtypes = f.restype, f.argtypes
            setattr(self.L, n, s)

    def __exit__(self, *exc):
        for n, f in self.real.items():
            setattr(self.L, n, f)


def core_calls(mk, n):
    q, k, v = mk((1, 1, 2, 8)), mk((1, 16, 1, 8)), mk((1, 16, 1, 8))
    out, seqlens = mk((1, 1, 2, 8)), mk((1,), int32=True)
    seqlens[:] = 16
    o, lse = sdpa.forward(q, k, v, return_lse=True)
    dout = o * 1
    return {
        "forward(cache_seqlens, out=)": (lambda: sdpa.forward(q, k, v, cache_seqlens=seqlens,
                                                              out=out), n),
        "forward(dense)": (lambda: sdpa.forward(q, k, v), n),
        "forward(causal, return_lse)": (lambda: sdpa.forward(q, k, v, causal=True,
                                                             return_lse=True), n),
        "backward": (lambda: sdpa.backward(dout, q, k, v, o, lse), n // 2),
    }


def report(label, calls, stub):
    with Stubbed(stub):
        res = ["%s %.1f" % (name, per_call(fn, m)) for name, (fn, m) in calls.items()]
    print("%-6s us a call: %s" % (label, "; ".join(res)), flush=True)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        stub = stub_library(tmp)

        def mk_np(shape, int32=False):
            return (np.zeros(shape, np.int32) if int32
                    else rng.standard_normal(shape).astype(np.float32))
        report("numpy", core_calls(mk_np, n), stub)
        try:
            import torch
        except ImportError:
            return
        torch.set_num_threads(1)

        def mk_t(shape, int32=False):
            return torch.zeros(shape, dtype=torch.int32) if int32 else torch.randn(shape)
        report("torch", core_calls(mk_t, n), stub)
        from sdpa import flash_attn_interface as FA, torch_ops, xformers_ops as XO
        q, k, v = torch.randn(1, 1, 2, 8), torch.randn(1, 16, 1, 8), torch.randn(1, 16, 1, 8)
        seq = torch.full((1,), 16, dtype=torch.int32)
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))

        def train():
            o = torch_ops.attention(qg, kg, vg)
            torch.autograd.grad(o, (qg, kg, vg), o)
        report("torch front ends", {
            "torch_ops.attention": (lambda: torch_ops.attention(q, k, v), n // 4),
            "flash_attn_func": (lambda: FA.flash_attn_func(q, k, v), n // 4),
            "flash_attn_with_kvcache": (lambda: FA.flash_attn_with_kvcache(
                q, k, v, cache_seqlens=seq), n // 4),
            "memory_efficient_attention": (lambda: XO.memory_efficient_attention(q, k, v),
                                           n // 4),
            "attention with grad": (lambda: torch_ops.attention(qg, kg, vg), n // 8),
            "attention fwd+bwd": (train, n // 8)}, stub)


if __name__ == "__main__":
    main()
