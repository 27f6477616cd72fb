"""Plots a bench.py results file: TFLOP/s against sequence length, one panel
per head dim, solid = non-causal, dashed = causal, one colour per backend.

  python3 bench/plot.py bench/results/<date>-<gpu>.json [--op fwd]
writes <same name>-<op>.png beside the JSON.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BACKENDS = ["sdpa", "torch_flash", "torch_cudnn", "torch_efficient"]
COLORS = {"sdpa": "C3", "torch_flash": "C0", "torch_cudnn": "C2", "torch_efficient": "C7"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--op", default="fwd")
    args = ap.parse_args()
    doc = json.load(open(args.results))
    recs = [r for r in doc["records"] if r["op"] == args.op]
    dims = sorted({r["d"] for r in recs})
    fig, axes = plt.subplots(1, len(dims), figsize=(5 * len(dims), 4), squeeze=False)
    for ax, d in zip(axes[0], dims):
        for causal, style in ((False, "-"), (True, "--")):
            rows = sorted((r for r in recs if r["d"] == d and r["causal"] == causal),
                          key=lambda r: r["s_q"])
            for be in BACKENDS:
                pts = [(r["s_q"], r[be]) for r in rows if r.get(be)]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, style, marker="o", color=COLORS[be],
                            label=f"{be}{' causal' if causal else ''}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{args.op} bf16 d={d}")
        ax.set_xlabel("sequence length (b*s = 16k)")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{doc['gpu']} {doc['date']} commit {doc['commit']}")
    fig.tight_layout()
    out = args.results[:-5] + f"-{args.op}.png"
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
