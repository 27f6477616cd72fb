"""Shared pieces of the benchmarks: locating the sdpa package, the results file
(DESIGN.md section 9 schema) and GPU timing with CUDA events.

Timing rule (METHOD.md): warm up, then time `reps` back-to-back calls between
two events (so host-side call overhead overlaps device work, as in a real
model loop), repeat `trials` times and take the median.
"""
import datetime
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))


def commit():
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                       stderr=subprocess.DEVNULL).decode().strip()
    except Exception:
        return os.environ.get("SDPA_COMMIT", "unknown")


def results_path(gpu, suffix=""):
    date = datetime.date.today().isoformat()
    tag = gpu.replace("NVIDIA ", "").replace(" ", "-").lower()
    out_dir = os.environ.get("SDPA_BENCH_OUT", os.path.join(HERE, "results"))
    os.makedirs(out_dir, exist_ok=True)
    return os.path.join(out_dir, f"{date}-{tag}{suffix}")


def write_results(gpu, records, suffix="", extra=None):
    doc = {"gpu": gpu, "commit": commit(), "date": datetime.date.today().isoformat(),
           "records": records}
    if extra:
        doc.update(extra)
    path = results_path(gpu, suffix) + ".json"
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path


def cuda_time_ms(fn, warmup=3, reps=10, trials=7):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def markdown_table(records, cols):
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in records:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append("-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
