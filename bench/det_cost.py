"""The deterministic backward's cost against the default one, in one process, and its
result bitwise equal over 5 runs (bf16, b*s = 16k, h*d = 2048, causal off / on).

  PYTHONPATH=python:bench python3 bench/det_cost.py [--dims 64,128] [--seqs 1024,2048,4096,8192]

Prints, per cell, both TFLOP/s, the deterministic call's time over the default's, and
whether five deterministic runs gave the same dq, dk, dv bit for bit.
"""
import argparse

import torch

from common import cuda_time_ms, flops
import sdpa


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default="1024,2048,4096,8192")
    args = ap.parse_args()
    for d in (int(x) for x in args.dims.split(",")):
        for s in (int(x) for x in args.seqs.split(",")):
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                torch.manual_seed(0)
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                           for _ in range(3))
                out, lse = sdpa.forward(q, k, v, causal=causal, return_lse=True)
                do = torch.randn_like(out)

                def run(det):
                    return sdpa.backward(do, q, k, v, out, lse, causal=causal, deterministic=det)

                ref = run(True)
                same = all(all(torch.equal(x, y) for x, y in zip(run(True), ref)) for _ in range(4))
                fl = flops("bwd", b, h, s, s, d, causal)
                t0 = min(cuda_time_ms(lambda: run(False)) for _ in range(2))
                t1 = min(cuda_time_ms(lambda: run(True)) for _ in range(2))
                print(f"d={d} s={s} causal={int(causal)}: default {fl / t0 / 1e9:6.1f} "
                      f"deterministic {fl / t1 / 1e9:6.1f} TFLOP/s, time ratio {t1 / t0:.3f}, "
                      f"bitwise over 5 runs {same}", flush=True)


if __name__ == "__main__":
    main()
