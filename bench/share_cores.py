"""A CPU machine's cores shared between processes (issue 39 and after), two cases:

- `runs`: one training run alone, then two started together, with the cores shared between the runs' ranks (the
  default, `cpu_threads: auto`) and without (`DPT_SHARE_CORES=0`: each run keeps the threads it would have alone).
  Prints each run's steady samples/s and the total against the run alone.
- `workers`: a CPU training run beside another process's simulator workers (`dpt sim-data`, a `dpt rollout`): with
  `cpu_threads: auto` the ranks count the workers in the machine's registry and leave them their cores; with
  `DPT_SHARE_CORES=0` the ranks keep every core and the two oversubscribe. Prints the run's steady samples/s and
  threads alone, beside the workers sharing, and beside them not sharing.

    python bench/share_cores.py runs [--steps 300] [--repeats 2]
    python bench/share_cores.py workers [--steps 300] [--workers 2] [--out DIR]
"""
import argparse, json, os, signal, subprocess, sys, tempfile, time
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")


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


def two_runs(a):
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


def beside_workers(a):
    import torchvision  # noqa: F401  (before MuJoCo's EGL)
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log, steady
    from dptoolkit.aloha import make_demos
    from dptoolkit.train import train
    sys.path.insert(0, str(Path(__file__).parent))
    from sim import recipe
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-share-cores-"))
    demos = make_demos("transfer_cube", n=6, out=out / "demos.zarr", workers=2, overwrite=True, progress=False).info.path
    base = ["task.dataset.obs_keys=[env_state,state]", f"training.max_steps={a.steps}", "dataloader.batch_size=64",
            "scaling.keep_effective_batch_size=false", f"training.log_every={max(1, a.steps // 30)}",
            f"training.checkpoint_every={a.steps}", *recipe(False)]
    rows = []
    for case in ("alone", "beside workers, sharing (auto)", "beside workers, DPT_SHARE_CORES=0"):
        env_share = os.environ.pop("DPT_SHARE_CORES", None)
        if case.endswith("=0"): os.environ["DPT_SHARE_CORES"] = "0"
        sim = None
        if case != "alone":   # camera episodes: ~25 s each, so the workers outlast the run
            sim = subprocess.Popen([sys.executable, "-m", "dptoolkit.cli", "sim-data", "--episodes", "400", "--camera",
                                    "--size", "72x96", "--workers", str(a.workers), "-o", str(out / "bg.zarr"),
                                    "--overwrite", "--no-progress"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(15)   # the workers spawned and registered
        rd = out / case.split(",")[0].replace(" ", "-") / str(len(rows))
        t = time.perf_counter()
        train(for_store(demos, name="test", overrides=base), nprocs=1, run_dir=rd, progress=False)
        wall = time.perf_counter() - t
        if sim is not None: os.killpg(sim.pid, signal.SIGTERM); sim.wait()
        os.environ.pop("DPT_SHARE_CORES", None)
        if env_share is not None: os.environ["DPT_SHARE_CORES"] = env_share
        log = steady(read_log(rd))
        q1, med, q3 = np.percentile(log.samples_per_s, [25, 50, 75])
        rows.append((case, med, q1, q3, int(log.threads.iloc[-1]), wall))
        print(f"{case:36s} {med:6.0f} samples/s [{q1:.0f}-{q3:.0f}], {rows[-1][4]} thread(s), {wall:.0f} s", flush=True)
    alone = rows[0][1]
    print(f"beside {a.workers} simulator workers on {os.cpu_count()} cores: sharing {rows[1][1] / alone:.2f}× the "
          f"run alone, not sharing {rows[2][1] / alone:.2f}× ({rows[1][1] / rows[2][1]:.1f}× from sharing)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case", choices=["runs", "workers"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=2, help="runs: repeats of the three cases")
    ap.add_argument("--workers", type=int, default=2, help="workers: simulator workers beside the run")
    ap.add_argument("--out", type=Path, help="workers: output folder")
    a = ap.parse_args()
    (two_runs if a.case == "runs" else beside_workers)(a)


if __name__ == "__main__":
    main()
