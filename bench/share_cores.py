"""A CPU training run beside another process's simulator workers (`dpt sim-data`, a `dpt rollout`): with
`cpu_threads: auto` the ranks count the workers in the machine's registry and leave them their cores; with
`$DPT_SHARE_CORES=0` (the behaviour before the workers registered) the ranks keep every core and the two
oversubscribe. Prints the run's steady samples/s and threads alone, beside the workers sharing, and beside them not
sharing.

    python bench/share_cores.py [--steps 300] [--workers 2] [--out DIR]
"""
import argparse, os, signal, subprocess, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300); ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import numpy as np
    import torchvision  # noqa: F401  (before MuJoCo's EGL)
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log, steady
    from dptoolkit.sim import make_demos
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


if __name__ == "__main__":
    main()
