"""What success-while-training costs the ranks (issue 36: goal ≤ 10 % of their throughput): one training run twice on
a simulator store, without and with `eval.rollout_every`, interleaved (plain, with, plain, with) so a busy spell
hits both; prints each run's steady samples/s (median, quartiles), wall time, the rollout records it wrote, and the
throughput ratio with its range.

    python bench/rollout_cost.py [--demos STORE] [--steps 600] [--every 200] [--episodes 4] [--repeats 1]
        [--camera] [--override KEY=VALUE] [--out DIR] [--json F]

STORE: a demonstration store (`dpt sim-data`); made here (10 low-dim demonstrations, or 72×96 camera ones with
`--camera`) when not given. The recipe is bench/sim.py's for the store's kind.

    python bench/rollout_cost.py --render RUN [--episodes 10] [--task-name T] [--inference-steps K] [--json F]

`--render RUN`: a camera run's episodes played in this process twice on each seed (1000 …), alternated: rendering the
camera at every step (as rollouts did before 2026-11-28) and only the frames a policy window reads; prints seconds per
episode of each and their ratio, and checks that each seed's outcome, steps and reward stage agree.
"""
import argparse, json, os, tempfile, time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")


def render_cost(a):
    "--render: seconds per camera episode rendering every step against only the frames a window reads (same seeds)."
    import numpy as np
    import torch
    from dptoolkit.aloha import AlohaSim
    from dptoolkit.sim import _load, rollout_episode, rollout_task, task_index
    torch.set_num_threads(1)   # as a rollout worker samples (one core each)
    step = AlohaSim.step
    def every(self, action, render=True): return step(self, action, True)
    run, rows = str(a.render.absolute()), []
    task, idx = rollout_task(None, a.task_name, run), task_index(_load(run)[1], a.task_name)   # loaded once, untimed
    kw = dict(task=task, inference_steps=a.inference_steps, task_index=idx)
    for seed in range(1000, 1000 + a.episodes):
        for mode in (("every", "read") if seed % 2 else ("read", "every")):
            AlohaSim.step = every if mode == "every" else step
            try: ep = rollout_episode(run, seed=seed, **kw)
            finally: AlohaSim.step = step
            rows.append(dict(mode=mode, seed=seed, **{k: ep[k] for k in ("success", "steps", "max_reward", "seconds")}))
    by = {m: [r for r in rows if r["mode"] == m] for m in ("every", "read")}
    same = all((x["success"], x["steps"], x["max_reward"]) == (y["success"], y["steps"], y["max_reward"])
               for x, y in zip(sorted(by["every"], key=lambda r: r["seed"]), sorted(by["read"], key=lambda r: r["seed"])))
    sec = {m: float(np.median([r["seconds"] for r in v])) for m, v in by.items()}
    tot = {m: sum(r["seconds"] for r in v) for m, v in by.items()}
    print(f"{a.episodes} {task} episodes of {a.render.name}: every frame rendered {sec['every']:.1f} s an episode (median), "
          f"only the frames read {sec['read']:.1f} s: {sec['every'] / sec['read']:.2f}× faster (totals "
          f"{tot['every']:.0f} / {tot['read']:.0f} s: {tot['every'] / tot['read']:.2f}×); outcomes, steps and stages "
          f"{'identical' if same else 'DIFFER'}; successes {sum(r['success'] for r in by['read'])}/{a.episodes}",
          flush=True)
    if a.json: a.json.write_text(json.dumps(dict(rows=rows, median_s=sec, total_s=tot, identical=same), indent=1))
    if not same: raise SystemExit("rollout_cost.py --render: the two ways of rendering gave different episodes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demos", type=Path); ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--every", type=int, default=200); ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1); ap.add_argument("--camera", action="store_true")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--override", action="append", default=[]); ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--render", type=Path, help="a camera run: rendering every step against only the frames read")
    ap.add_argument("--inference-steps", type=int, default=None, help="with --render: Euler / denoising steps")
    ap.add_argument("--task-name", help="with --render: the task a task-conditioned run does (and is played in)")
    a = ap.parse_args()
    if a.render: return render_cost(a)
    import numpy as np
    import torchvision  # noqa: F401  (before MuJoCo's EGL)
    from dptoolkit.config import for_store
    from dptoolkit.report import read_log, steady
    from dptoolkit.aloha import make_demos
    from dptoolkit.store import describe
    from sim import recipe as sim_recipe   # bench/sim.py: one recipe for both scripts
    from dptoolkit.train import train
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-rollout-cost-"))
    demos = a.demos
    if demos is None:
        t = time.perf_counter()
        demos = make_demos("transfer_cube", n=10, out=out / "demos.zarr", camera=a.camera, size=(72, 96), workers=2,
                           overwrite=True, progress=False).info.path
        print(f"demonstrations: {demos} ({time.perf_counter() - t:.0f} s)", flush=True)
    arrays = describe(demos).arrays
    camera = "head_camera" in arrays
    keys = "[head_camera,state]" if camera else "[env_state,state]"
    recipe = sim_recipe(camera, arrays["head_camera"].shape[2:] if camera else (72, 96))
    base = [f"task.dataset.obs_keys={keys}", f"training.max_steps={a.steps}", f"dataloader.batch_size={a.batch}",
            "scaling.keep_effective_batch_size=false", f"training.log_every={max(1, a.steps // 30)}", *recipe,
            *a.override]
    with_rollouts = [f"eval.rollout_every={a.every}", f"eval.rollout_episodes={a.episodes}",
                     f"training.checkpoint_every={a.every}", "training.keep_checkpoints=50"]
    runs = []
    for rep in range(a.repeats):
        for kind, extra in (("plain", [f"training.checkpoint_every={a.steps}"]), ("rollouts", with_rollouts)):
            rd = out / f"{kind}-{rep + 1}"
            cfg = for_store(demos, name="test", overrides=base + extra)
            t = time.perf_counter()
            train(cfg, nprocs=1, run_dir=rd, progress=False)
            wall = time.perf_counter() - t
            log = steady(read_log(rd))
            q1, med, q3 = np.percentile(log.samples_per_s, [25, 50, 75])
            try: records = read_log(rd, "rollout")
            except Exception: records = None
            runs.append(dict(kind=kind, repeat=rep + 1, wall_s=wall, samples_per_s=med, low=q1, high=q3,
                             threads=int(log.threads.iloc[-1]) if "threads" in log else None,
                             rollouts=0 if records is None else len(records),
                             success=None if records is None else records[["step", "success"]].to_dict("records")))
            r = runs[-1]
            print(f"{kind:8s} #{rep + 1}: {r['samples_per_s']:.0f} samples/s [{q1:.0f}-{q3:.0f}], {r['threads']} "
                  f"thread(s), {wall:.0f} s wall, {r['rollouts']} rollout record(s)", flush=True)
    plain = [r for r in runs if r["kind"] == "plain"]
    roll = [r for r in runs if r["kind"] == "rollouts"]
    med = lambda rs, k: float(np.median([r[k] for r in rs]))
    ratio = med(roll, "samples_per_s") / med(plain, "samples_per_s")
    lo, hi = med(roll, "low") / med(plain, "high"), med(roll, "high") / med(plain, "low")
    wall = med(roll, "wall_s") / med(plain, "wall_s")
    print(f"with rollouts every {a.every} steps ({a.episodes} episodes each): {ratio:.2f}× the plain run's samples/s "
          f"[{lo:.2f}-{hi:.2f}] (cost {1 - ratio:.0%}; goal ≤ 10 %), wall time {wall:.2f}× (includes the final "
          f"rollout); {os.cpu_count()} cores", flush=True)
    if a.json:
        a.json.write_text(json.dumps(dict(runs=runs, ratio=ratio, ratio_low=lo, ratio_high=hi, wall_ratio=wall,
                                          steps=a.steps, every=a.every, episodes=a.episodes, camera=camera,
                                          cores=os.cpu_count()), indent=1, default=str))


if __name__ == "__main__":
    main()
