"""Paired A/B of decoding builds against each other and torch cuDNN.

Per cell (bench_decode.py's problem: bf16, 32/8 heads, d 128, s_q 1), one call of
each library build and one of torch's CUDNN backend are captured as CUDA graphs
and timed in rotating order, round after round, so the machine's drift (power
cap, temperature) falls on all of them alike. Printed: GB/s of K/V read (medians
over the rounds), whether the builds' outputs are equal bit for bit, and the
per-round time ratios (median [min, max]) of each build to the first and to
cuDNN. On the H200 the ratios repeat within about 0.1%, where separate medians
(bench_decode.py, decode_probe.py --libs) move by up to 1% between runs.

  PYTHONPATH=python:bench python3 bench/decode_pair.py \\
      --libs base=/path/libsdpa.so,new=/path/libsdpa.so --cells 32x4096,64x16384 [--page 16]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import common
import sdpa
from bench_decode import D, H, H_K, paged_cache


def replay_ms(graph, reps):
    """One trial: reps back-to-back replays, ms each (rounds interleave, so no median here)."""
    return common.cuda_time_ms(graph.replay, warmup=0, reps=reps, trials=1)


def graph_of(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return common.capture_graph(fn)


def cell(libs, b, L, rounds, page):
    nbytes = 2 * b * L * H_K * D * 2
    torch.manual_seed(0)
    q = torch.randn(b, 1, H, D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)
    k = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    kc, vc, extra = k, v, {}
    if page:  # the benchmark grid's paged cache (shuffled pages)
        kc, vc, extra["block_table"] = paged_cache(b, L, page)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

    names, graphs, outs = [], [], []
    for name, path in libs:
        common.use_library(path)
        graphs.append(graph_of(lambda: sdpa.forward(q, kc, vc, cache_seqlens=seqlens, out=out, **extra)))
        outs.append(out.clone())
        names.append(name)
    graphs.append(graph_of(cudnn))
    names.append("cudnn")
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    reps = max(5, int(30e-3 / (nbytes / 4.4e12)))  # about 30 ms a timing
    for g in graphs:
        replay_ms(g, reps)
    times = [[] for _ in graphs]
    for r in range(rounds):
        for x in range(len(graphs)):
            i = (r + x) % len(graphs)
            times[i].append(replay_ms(graphs[i], reps))

    def ratio(i, j):
        rs = [times[j][r] / times[i][r] for r in range(rounds)]
        return f"{statistics.median(rs):.4f} [{min(rs):.4f}, {max(rs):.4f}]"

    line = " ".join(f"{n} {nbytes / statistics.median(t) / 1e6:.0f}" for n, t in zip(names, times))
    line += f" | bitwise {'same' if same else 'DIFFERENT'}"
    for i in range(1, len(libs)):
        line += f" | {names[i]}/{names[0]} {ratio(i, 0)}"
    for i in range(len(libs)):
        line += f" | {names[i]}/cudnn {ratio(i, len(graphs) - 1)}"
    print(f"b={b} L={L} page={page} GB/s: {line}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libs", required=True, help="name=path,...: libsdpa builds; ratios are to the first")
    ap.add_argument("--cells", default="32x4096,32x16384,64x4096,64x16384", help="BxS_K,...")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--page", type=int, default=0, help="page size of the libraries' cache (0: contiguous)")
    args = ap.parse_args()
    libs = common.parse_libs(args.libs)
    for c in args.cells.split(","):
        b, L = (int(x) for x in c.split("x"))
        cell(libs, b, L, args.rounds, args.page)


if __name__ == "__main__":
    main()
