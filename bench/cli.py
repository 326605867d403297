"""How fast `dpt` answers: `dpt --help` and each `dpt X --help` against `python -c "import torch"` and a bare
`python -c pass`, measured in the same run (median of --reps runs each).
Usage: python bench/cli.py [--reps 5]
"""
import argparse, statistics, subprocess, sys, time


def t(cmd, reps):
    ts = []
    for _ in range(reps):
        s = time.perf_counter(); subprocess.run(cmd, capture_output=True, check=True); ts.append(time.perf_counter() - s)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--reps", type=int, default=5); a = ap.parse_args()
    from dptoolkit.cli import build_parser
    sub = next(x for x in build_parser()._actions if x.__class__.__name__ == "_SubParsersAction")
    base, torch_ = t([sys.executable, "-c", "pass"], a.reps), t([sys.executable, "-c", "import torch"], a.reps)
    print(f"python -c pass: {base:.2f} s | import torch: {torch_:.2f} s")
    rows = [("dpt --help", t(["dpt", "--help"], a.reps))] + [(f"dpt {c} --help", t(["dpt", c, "--help"], a.reps)) for c in sub.choices]
    for name, v in rows: print(f"{name:24s} {v:.2f} s  ({v / torch_:.2f}× import torch)")


if __name__ == "__main__":
    main()
