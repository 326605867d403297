"""What the launcher's forkserver pre-imports, measured: `train(cfg, nprocs=2)` of a 4-step run, several in one
process, with the launched function's module (`dptoolkit.train`, with the policy and diffusers) imported once by the
forkserver, against the forkserver of before (torch, torch.distributed, cloudpickle and dptoolkit.launch only: every
rank then imports dptoolkit.train itself). Each case runs in a fresh process, alternating; seconds per `train` call,
the first (which starts the forkserver) apart.

    python bench/preload.py [--trains 4] [--repeats 3]
"""
import argparse, json, statistics, subprocess, sys, tempfile, time
from pathlib import Path

CASE = r'''
import json, sys, tempfile, time
from pathlib import Path
def main():
    from dptoolkit.store import sample_data
    from dptoolkit.config import for_store
    from dptoolkit.train import train
    import dptoolkit.launch as L
    if sys.argv[1] == "before": L._context("forkserver", None)     # the server's preload list as it was
    d = Path(tempfile.mkdtemp())
    s = sample_data(d, tasks=1, episodes=4)[0]
    out = []
    for i in range(int(sys.argv[2])):
        t = time.perf_counter()
        train(for_store(s, name="test", overrides=["training.max_steps=4", "training.log_every=2"]), nprocs=2,
              run_dir=d / f"r{i}", progress=False)
        out.append(time.perf_counter() - t)
    print("RESULT", json.dumps(out))
if __name__ == "__main__": main()
'''


def run(case, n):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f: f.write(CASE)
    r = subprocess.run([sys.executable, f.name, case, str(n)], capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("RESULT")), None)
    if line is None: raise SystemExit(r.stdout[-2000:] + r.stderr[-2000:])
    return json.loads(line.split(" ", 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trains", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    res = {"before": [], "after": []}
    for _ in range(a.repeats):
        for case in ("before", "after"): res[case].append(run(case, a.trains))
    for case, runs in res.items():
        first = statistics.median(r[0] for r in runs)
        later = statistics.median(x for r in runs for x in r[1:])
        print(f"{case:6s}: first train() {first:5.2f} s (starts the forkserver), each later one {later:5.2f} s")
    ratio = [b / a_ for rb, ra in zip(res["before"], res["after"]) for b, a_ in zip(rb[1:], ra[1:])]
    print(f"later train() calls: before / after = {statistics.median(ratio):.2f}× "
          f"(range {min(ratio):.2f}-{max(ratio):.2f}, {len(ratio)} pairs)")


if __name__ == "__main__":
    main()
