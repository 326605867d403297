"""A study on ALOHA transfer-cube (issue 48): the low-dim recipe with two objectives (DDPM, flow predicting the clean
chunk) × training seeds, every run rolled out on the same episode seeds, through `study` on this machine's cores (runs
side by side, each pinned to its own core group). Then the same runs one at a time, each alone on the whole machine
(training and the same rollouts), and the ratio: study wall time / sum of the runs' own times (goal ≤ 1.1 on 2 cores:
running a study side by side costs no more than running its runs one after another). Prints the study's table and its
paired comparison.
Usage: python bench/study.py [--store demos.zarr] [--demos 50] [--steps 300] [--seeds 0,1,2] [--episodes 10]
       [--alone N] [--out DIR]
"""
import argparse, json, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim import recipe   # noqa: E402  (bench/sim.py: issue 25 / 36's training recipe)

GRID = {"policy.objective": ["ddpm", "flow"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, help="demonstrations made before (dpt sim-data)")
    ap.add_argument("--demos", type=int, default=50)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--alone", type=int, help="time only N runs alone, spread over the grid (default: all)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    from dptoolkit.config import for_store
    from dptoolkit.aloha import make_demos
    from dptoolkit.success import rollout_checkpoint
    from dptoolkit.study import study
    from dptoolkit.train import train
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-study-"))
    store = a.store
    if store is None:
        store = make_demos("transfer_cube", n=a.demos, out=out / "demos.zarr", workers=2, overwrite=True).info.path
    base = [f"training.max_steps={a.steps}", "dataloader.batch_size=64", f"training.checkpoint_every={a.steps}",
            f"training.log_every={max(1, a.steps // 10)}", "task.dataset.val_ratio=0.04",
            "task.dataset.obs_keys=[env_state,state]", "policy.num_inference_steps=16", *recipe(False)]
    cfg = for_store(store, base, name="test")
    seeds = [int(s) for s in a.seeds.split(",")]
    t0 = time.perf_counter()
    s = study(cfg, GRID, seeds, out / "study", rollout=dict(episodes=a.episodes, seed=1000), progress=True)
    wall = time.perf_counter() - t0
    print(f"study: {wall:.0f} s wall for {len(seeds) * 2} runs side by side", flush=True)
    t = s.table()
    print(t.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(s.compare("ddpm", "flow"))
    # the same runs alone, one after another, each on the whole machine (its ranks' threads and 2 rollout workers)
    m = json.loads((s.out / "study.json").read_text())
    k = len(m["runs"])
    alone, runs = [], [m["runs"][i * k // a.alone] for i in range(a.alone)] if a.alone else m["runs"]
    from dptoolkit.config import apply_overrides
    from omegaconf import OmegaConf
    for r in runs:
        c = OmegaConf.create(m["config"])
        OmegaConf.set_struct(c, True)
        apply_overrides(c, r["overrides"])
        rd, t1 = out / "alone" / r["name"], time.perf_counter()
        train(c, nprocs=1, run_dir=rd, progress=False)
        rec = rollout_checkpoint(rd / "checkpoints" / (rd / "checkpoints" / "latest").read_text().strip(),
                                 episodes=a.episodes, seed=1000, workers=2)
        alone.append(time.perf_counter() - t1)
        print(f"alone {r['name']}: {alone[-1]:.0f} s (success {rec['success']:.0%})", flush=True)
    total = sum(alone) * len(m["runs"]) / len(runs)
    print(f"study wall / sum of the runs alone = {wall:.0f} / {total:.0f} s = {wall / total:.2f}"
          + (f" (sum extrapolated from {len(runs)} of {len(m['runs'])} runs)" if len(runs) < len(m["runs"]) else ""))


if __name__ == "__main__":
    main()
