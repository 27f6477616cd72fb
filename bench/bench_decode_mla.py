"""MLA decoding benchmark (issue #29's decode_mla): DeepSeek's latent attention
at d_qk 576, d_v 512, 128 query heads on one kv head, s_q 1, bf16, a paged
cache in pages of 64 (shuffled block table) whose V is K's first 512 columns
(v a view of k: the latent cache is read once for both products).

Unit: TFLOP/s, 2 b h s_k (576 + 512) FLOPs a call, timed as CUDA-graph
replays of one call (device time). Each row also has the roofline
max(bytes / BW, FLOPs / PEAK) as a rate, with bytes = the cache rows read
once (b s_k 576 2) plus q and out, and sdpa's fraction of it. BW and PEAK:
on an H200 the issue's 4.0 TB/s and 790 TFLOP/s; elsewhere the copy rate
and the bf16 matmul rate measured in the same run (both are recorded).
References where they run the shape: torch SDPA's EFFICIENT backend on the
same cache made contiguous (torch has no pages) and expanded to the 128
heads (its fused kernels take no GQA at d_qk != d_v), and sdpa's SIMT row
(the path this shape took before the MLA row) on the smallest cells.
Writes bench/results/<date>-<gpu>-decode_mla.json (op "decode_mla").

  python3 bench/bench_decode_mla.py [--batches 8,32,128] [--lens 1024,4096,16384,32768]
"""
import argparse
import sys

from common import capture_graph, cuda_time_ms, flops, markdown_table, write_results

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import sdpa

H, H_K, D, DV, PAGE = 128, 1, 576, 512, 64
SIMT_MAX_WORK = 8 * 4096  # b * s_k at most for the SIMT reference (it runs ~100x slower)


def graph_ms(fn, est_ms):
    """Median ms of CUDA-graph replays of fn (one call captured)."""
    fn()
    torch.cuda.synchronize()
    g = capture_graph(fn)
    reps = max(3, min(100, int(20.0 / max(est_ms, 1e-3))))
    return cuda_time_ms(g.replay, warmup=2, reps=reps, trials=5)


def try_ms(fn, est_ms, label):
    try:
        return graph_ms(fn, est_ms)
    except Exception as e:  # a backend that cannot run this problem
        print(f"  ({label}: {type(e).__name__}: {str(e)[:160]})", file=sys.stderr)
        return None


def measured_rates():
    """(copy TB/s, bf16 matmul TFLOP/s) of this GPU, measured now."""
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    ms = cuda_time_ms(lambda: y.copy_(x), warmup=3, reps=10, trials=5)
    copy_tbs = 2 * x.numel() / (ms * 1e-3) / 1e12
    del x, y
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = cuda_time_ms(lambda: a @ bm, warmup=3, reps=10, trials=5)
    mm_tflops = 2 * 8192 ** 3 / (ms * 1e-3) / 1e12
    return copy_tbs, mm_tflops


def bench_one(b, L, bw_tbs, peak_tflops):
    torch.manual_seed(0)
    work = flops("decode_mla", b, H, 1, L, D, False, d_v=DV)
    nbytes = b * L * D * 2 + b * H * (D + DV) * 2
    roof_ms = max(nbytes / (bw_tbs * 1e12), work / (peak_tflops * 1e12)) * 1e3
    tflops = lambda ms: work / (ms * 1e-3) / 1e12 if ms else None
    q = torch.randn(b, 1, H, D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(b, 1, H, DV, device="cuda", dtype=torch.bfloat16)
    seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)
    nblocks = b * L // PAGE
    kp = torch.randn(nblocks, PAGE, H_K, D, device="cuda", dtype=torch.bfloat16)
    vp = kp[..., :DV]
    bt = torch.randperm(nblocks, device="cuda", dtype=torch.int64).to(torch.int32).view(b, L // PAGE)
    rec = {"op": "decode_mla", "dtype": "bf16", "b": b, "s_q": 1, "s_k": L, "h": H, "h_k": H_K,
           "d": D, "d_v": DV, "causal": False, "paged": PAGE}
    run = lambda: sdpa.forward(q, kp, vp, cache_seqlens=seqlens, block_table=bt, out=out)
    rec["sdpa"] = tflops(graph_ms(run, roof_ms * 2))
    rec["roofline"] = tflops(roof_ms)
    rec["sdpa_vs_roofline"] = rec["sdpa"] / rec["roofline"]
    ref = out.float().clone()
    if b * L <= SIMT_MAX_WORK:
        out2 = torch.empty_like(out)
        simt = lambda: sdpa.forward(q, kp, vp, cache_seqlens=seqlens, block_table=bt, out=out2,
                                    kernel="fwd_simt")
        rec["sdpa_simt"] = tflops(try_ms(simt, roof_ms * 200, "sdpa simt"))
        rec["max_abs_diff_vs_simt"] = (out2.float() - ref).abs().max().item()
    # torch: the same cache, contiguous per sequence, k [b, 1, L, 576] expanded to the
    # query heads (a stride-0 view), v its first 512 columns
    kc = kp[bt.view(-1).long()].view(b, L, H_K, D).transpose(1, 2).expand(b, H, L, D)
    qt = q.transpose(1, 2)
    def run_eff():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return F.scaled_dot_product_attention(qt, kc, kc[..., :DV])
    rec["torch_efficient"] = tflops(try_ms(run_eff, roof_ms * 10, "torch efficient"))
    if rec["torch_efficient"] is not None:
        rec["max_abs_diff_vs_torch_efficient"] = (
            run_eff().transpose(1, 2).float() - ref).abs().max().item()
    del kp, vp, kc
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="8,32,128")
    ap.add_argument("--lens", default="1024,4096,16384,32768")
    args = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    copy_tbs, mm_tflops = measured_rates()
    h200 = "H200" in gpu
    bw, peak = (4.0, 790.0) if h200 else (copy_tbs, mm_tflops)
    print(f"{gpu}: copy {copy_tbs:.2f} TB/s, bf16 matmul {mm_tflops:.0f} TFLOP/s; roofline "
          f"with {bw:.2f} TB/s, {peak:.0f} TFLOP/s", flush=True)
    records = []
    for b in [int(x) for x in args.batches.split(",")]:
        for L in [int(x) for x in args.lens.split(",")]:
            rec = bench_one(b, L, bw, peak)
            records.append(rec)
            print(f"decode_mla b={b} L={L}: " + ", ".join(
                f"{n}={rec[n]:.1f}" for n in ("sdpa", "roofline", "sdpa_vs_roofline",
                                              "torch_efficient", "sdpa_simt")
                if rec.get(n) is not None), flush=True)
    cols = ["b", "s_k", "sdpa", "roofline", "sdpa_vs_roofline", "torch_efficient", "sdpa_simt"]
    table = markdown_table(records, cols)
    path = write_results(gpu, records, suffix="-decode_mla",
                         extra={"unit": "TFLOP/s (2 b h s_k (d + d_v) a call), CUDA-graph replays",
                                "roofline_tb_s": bw, "roofline_tflop_s": peak,
                                "measured_copy_tb_s": copy_tbs,
                                "measured_matmul_tflop_s": mm_tflops})
    print(table)
    print("wrote", path)


if __name__ == "__main__":
    main()
