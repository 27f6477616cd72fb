"""CPU benchmark: sdpa's CPU backend against torch's CPU
scaled_dot_product_attention, same thread count, in one process, fp32,
b=1 h=16 s=2048 d=128, causal and not (the foundation issue's item 9).
FLOPs 4*b*h*s*s*d, halved when causal. Median of `--iters` timed runs after
warm-up. Writes bench/results/<date>-<host>-cpu.json.

  python3 bench/cpu_bench.py --threads 16
"""
import argparse
import os
import platform
import statistics
import time

from common import markdown_table, write_results

import torch
import torch.nn.functional as F

import sdpa


def median_ms(fn, iters):
    for _ in range(2):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--seqlen", type=int, default=2048)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    b, h, s, d = 1, 16, args.seqlen, 128
    records = []
    for causal in (False, True):
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, dtype=torch.float32) for _ in range(3))
        # torch's native layout [b, h, s, d], contiguous, same values
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        out = torch.empty_like(q)
        fl = 4.0 * b * h * s * s * d / (2 if causal else 1)
        ms_sdpa = median_ms(lambda: sdpa.forward(q, k, v, causal=causal, num_threads=args.threads,
                                                 out=out), args.iters)
        ms_torch = median_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                             args.iters)
        ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
        err = (out - ref).abs().max().item()
        rec = {"op": "fwd", "dtype": "f32", "b": b, "s_q": s, "s_k": s, "h": h, "h_k": h, "d": d,
               "causal": causal, "paged": 0, "dropout": 0.0, "threads": args.threads,
               "sdpa": fl / ms_sdpa / 1e6, "torch_cpu": fl / ms_torch / 1e6,  # FLOP/ms / 1e6 = GFLOP/s
               "sdpa_ms": ms_sdpa, "torch_ms": ms_torch, "max_abs_diff": err}
        rec["ratio"] = rec["sdpa"] / rec["torch_cpu"]
        records.append(rec)
        print(f"causal={causal}: sdpa {ms_sdpa:.2f} ms ({rec['sdpa']:.0f} GFLOP/s), "
              f"torch {ms_torch:.2f} ms ({rec['torch_cpu']:.0f} GFLOP/s), ratio {rec['ratio']:.2f}, "
              f"max|diff| {err:.2e}", flush=True)
    host = f"cpu-{args.threads}t-" + platform.machine()
    path = write_results(host, records, suffix="", extra={"units": "GFLOP/s (fp32)",
                                                          "gemm": sdpa.cpu_gemm_impl()
                                                          if hasattr(sdpa, "cpu_gemm_impl") else None})
    table = markdown_table(records, ["causal", "threads", "sdpa", "torch_cpu", "ratio", "sdpa_ms",
                                     "torch_ms", "max_abs_diff"])
    with open(path[:-5] + ".md", "w") as f:
        f.write(f"# CPU forward, fp32 b1 h16 s{s} d128, GFLOP/s\n\n{table}\n")
    print(table)
    print("wrote", path)


if __name__ == "__main__":
    main()
