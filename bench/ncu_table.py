"""ncu --csv output (one row per kernel and metric) as one line per kernel
launch: a short kernel name, then each metric's value in the order asked for.
Launches whose name matches --skip (default: torch's random fills) are left out.

  ncu --csv --metrics a,b,c python3 ... | python3 bench/ncu_table.py [--skip REGEX]
"""
import argparse
import csv
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip", default="distribution|fill|elementwise|copy")
    args = ap.parse_args()
    lines = [ln for ln in sys.stdin if ln.startswith('"')]
    launches, order = {}, []
    for row in csv.DictReader(lines):
        key = row["ID"]
        if key not in launches:
            launches[key] = (row["Kernel Name"], {})
            order.append(key)
        launches[key][1][row["Metric Name"]] = f'{row["Metric Value"]}{row["Metric Unit"] and " " + row["Metric Unit"] or ""}'
    metrics = []
    for key in order:
        for m in launches[key][1]:
            if m not in metrics:
                metrics.append(m)
    print("kernel | " + " | ".join(metrics))
    for key in order:
        name, vals = launches[key]
        if re.search(args.skip, name):
            continue
        short = re.sub(r"\(.*", "", name)[:60]
        print(f"{short} | " + " | ".join(vals.get(m, "-") for m in metrics))


if __name__ == "__main__":
    main()
