"""fwd_once.py - a few sdpa forward calls on one bench problem, for a profiler
(Nsight Compute: --launch-skip 2 --launch-count 1 takes the third).

  SDPA_LIBRARY=build-gpu/libsdpa.so PYTHONPATH=python \\
    python3 bench/fwd_once.py [--d 128] [--dropout 0.1] [--causal] [--calls 3]

Problem: bench.py's (bf16, b 4, s 4096, h * d = 2048, BSHD).
"""
import argparse

import torch

import sdpa

ap = argparse.ArgumentParser()
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--dropout", type=float, default=0.0)
ap.add_argument("--causal", action="store_true")
ap.add_argument("--calls", type=int, default=3)
a = ap.parse_args()
b, s, h = 4, 4096, 2048 // a.d
q, k, v = (torch.randn(b, s, h, a.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for i in range(a.calls):
    sdpa.forward(q, k, v, causal=a.causal, dropout_p=a.dropout, seed=1234, offset=i)
torch.cuda.synchronize()
print("fwd_once: d %d, dropout %g, causal %d, %d calls" % (a.d, a.dropout, a.causal, a.calls))
