"""Two training runs on one CPU machine (issue 39): one run alone, then two started together, with the cores shared
between the runs' ranks (the default, `cpu_threads: auto`) and without (`DPT_SHARE_CORES=0`: each run keeps the
threads it would have alone, as before). Prints each run's steady samples/s and the total against the run alone.

    python bench/shared_cores.py [--steps 300] [--repeats 2]
"""
import argparse, json, os, subprocess, tempfile, time
from pathlib import Path

import numpy as np


def start(store, out, steps, share):
    env = {**os.environ, "DPT_SHARE_CORES": "1" if share else "0"}
    return subprocess.Popen(["dpt", "train", "--config", "test", "--data", str(store), "--out", str(out), "--no-progress",
                             f"training.max_steps={steps}", "training.log_every=10", "training.checkpoint_every=0",
                             "policy.down_dims=[64,128,256]", "dataloader.batch_size=64"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def rate(run) -> float:
    "Median samples/s over the steady half of the run (the first half holds start-up and the other run's start)."
    recs = [json.loads(l) for l in open(run / "logs.jsonl")]
    return float(np.median([r["samples_per_s"] for r in recs[len(recs) // 2:]]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300), ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    from dptoolkit.store import sample_data
    d = Path(tempfile.mkdtemp(prefix="dpt-concurrent-"))
    store = sample_data(d, tasks=1, episodes=20, seed=0)[0]
    res = {"alone": [], "shared": [], "not shared": []}
    for rep in range(a.repeats):
        p = start(store, d / f"alone{rep}", a.steps, True)
        p.communicate()
        res["alone"].append(rate(d / f"alone{rep}"))
        for mode, share in (("shared", True), ("not shared", False)):
            runs = [d / f"{mode.replace(' ', '')}{rep}-{i}" for i in range(2)]
            ps = [start(store, r, a.steps, share) for r in runs]
            outs = [p.communicate()[0] for p in ps]
            if share: assert any("cores are shared with" in o for o in outs), outs[0][-500:]
            res[mode].append([rate(r) for r in runs])
        print(f"repeat {rep}: alone {res['alone'][-1]:.0f} samples/s; two shared "
              f"{' + '.join(f'{x:.0f}' for x in res['shared'][-1])}; two not shared "
              f"{' + '.join(f'{x:.0f}' for x in res['not shared'][-1])}", flush=True)
    alone = np.median(res["alone"])
    for mode in ("shared", "not shared"):
        tot = [sum(x) for x in res[mode]]
        print(f"two runs, {mode}: total {np.median(tot):.0f} samples/s = {np.median(tot) / alone:.2f}× one run alone "
              f"({alone:.0f}); the slower run {np.median([min(x) for x in res[mode]]):.0f} samples/s "
              f"({np.median([min(x) for x in res[mode]]) / alone:.2f}× alone)")


if __name__ == "__main__":
    main()
