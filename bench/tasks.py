"""More than one task in closed loop (issue 67), first part: each scripted expert's success on --seeds seeds (ALOHA
transfer-cube and insertion; the same waypoint experts `dpt sim-data` records with), with its 95 % Wilson interval, the
seeds it failed on and seconds per episode; `--frames F.png` draws both tasks' first
and last frames of one expert episode each (the head camera), the picture the sim chapter shows (`--frames-of RUN`:
a policy run's best held-out episode in each task instead).
`--policies DIR`: the policies' part. Camera demonstrations of each task (`--demos` episodes, DART noise per task,
head camera `--size`, only the successes kept), their merge, and camera policies (issue 36's pixel recipe; flow
predicting the clean chunk) trained `--steps` steps per training seed: `single` on each task's own store, `two` on the
merge with `policy.task_embed_dim=16` and `blind` on it with 0 (the control: does the policy need to be told?). Plain,
they read the camera and qpos only and learn nothing else; `+aux` after a recipe: the encoder also learns the
objects' poses from the frame (issue 36's aux target; across tasks `merge(pad=["env_state"])` zero-pads 7 → 14).
Each run's final EMA policy plays the `--episodes` held-out seeds 1000 … of each task it knows (`--inference-steps`
Euler steps); each run and its rollouts are kept in DIR and reused.
Usage: python bench/tasks.py [--seeds 100] [--start 0] [--workers 2] [--noise 0] [--frames F.png] [--json F]
       python bench/tasks.py --policies DIR [--train-seeds 0,1] [--recipes single,two,blind] [--steps 2000] ...
"""
import argparse, json, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim import recipe   # noqa: E402  (bench/sim.py: issue 25 / 36's training recipe)


def expert(task, a):
    from dptoolkit.aloha import make_demos
    from dptoolkit.stats import wilson
    from dptoolkit.store import open_store
    out = Path(tempfile.mkdtemp(prefix=f"dpt-{task}-")) / "demos.zarr"
    t = time.perf_counter()
    make_demos(task, n=a.seeds, out=out, workers=a.workers, seed=a.start, keep="all", progress=False, noise=a.noise)
    wall = time.perf_counter() - t
    attrs = dict(open_store(out).attrs)["sim"]
    ok = attrs["expert_success"]
    lo, hi = wilson(sum(ok), len(ok))
    failed = [s for s, x in zip(attrs["seeds"], ok) if not x]
    row = dict(task=task, successes=sum(ok), episodes=len(ok), low=lo, high=hi, failed_seeds=failed,
               seconds_per_episode=wall * a.workers / len(ok), wall_s=wall)
    print(f"{task:13s} expert {sum(ok)}/{len(ok)} = {sum(ok) / len(ok):.0%} [{lo:.0%}–{hi:.0%}]; failed seeds "
          f"{failed[:12]}{' …' if len(failed) > 12 else ''}; {row['seconds_per_episode']:.1f} s per episode",
          flush=True)
    return row


def frames(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dptoolkit.aloha import expert_episode
    fig, ax = plt.subplots(2, 2, figsize=(8, 6))
    for i, task in enumerate(("transfer_cube", "insertion")):
        ep = expert_episode(task, 0, True, (120, 160), 400, 0.0)
        cam = ep["arrays"]["head_camera"]
        for j, (k, name) in enumerate(((0, "first frame"), (len(cam) - 1, f"step {len(cam) - 1}"))):
            ax[i, j].imshow(cam[k].transpose(1, 2, 0))
            ax[i, j].set_title(f"{task}, {name} ({'success' if ep['success'] else 'failure'})", fontsize=9)
            ax[i, j].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"frames: {path}")


def _store(a, task):
    from dptoolkit.aloha import make_demos
    p = a.policies / f"{task}.zarr"
    if not p.exists():
        t = time.perf_counter()
        noise = dict(kv.split("=") for kv in a.demo_noise.split(","))
        d = make_demos(task, n=a.demos, out=p, camera=True, size=a.size, workers=a.workers,
                       noise=float(noise.get(task, 0)), progress=False)
        print(d, f"({time.perf_counter() - t:.0f} s)", flush=True)
    return p


def policy_frames(path, run, tasks, episodes=50, inference_steps=1):
    """The picture of a run's policy in each task: four frames of its best kept held-out episode there (a success, else
    the highest reward stage; from `_rolled`'s record of seeds 1000 ...), replayed with a video (120×160)."""
    import imageio
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from dptoolkit.sim import _load_path, rollout_episode, task_index
    run, pol = Path(run).absolute(), _load_path(str(Path(run).absolute()))
    fig, ax = plt.subplots(len(tasks), 4, figsize=(12, 2.9 * len(tasks)), squeeze=False)
    for i, task in enumerate(tasks):
        kept = json.loads((run / f"rollout-{task}-seed1000-{episodes}-steps{inference_steps}.json").read_text())
        seed = max(kept["outcomes"], key=lambda s: (kept["outcomes"][s], kept["max_reward"][s], -int(s)))
        v = Path(tempfile.mkdtemp()) / f"{task}.mp4"
        ep = rollout_episode(str(run), task, int(seed), video=str(v), video_size=(120, 160),
                             inference_steps=inference_steps, task_index=task_index(pol, task))
        cam = imageio.mimread(v, memtest=False)
        for j, k in enumerate(np.linspace(0, len(cam) - 1, 4).astype(int)):
            ax[i, j].imshow(cam[k])
            end = (f"\nsuccess ({kept['success']}/{kept['episodes']} held-out)" if ep["success"] else
                   f"\nstage {ep['max_reward']} of 4 ({kept['success']}/{kept['episodes']} held-out)")
            ax[i, j].set_title(f"{task}, seed {seed}, step {k}" + (end if j == 3 else ""), fontsize=8)
            ax[i, j].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"frames of {run.name}: {path}")


def _rolled(a, run, task, conditioned):
    "Success of `run` on `task`'s held-out seeds, kept beside the run (each seed's outcome and highest reward stage)."
    from dptoolkit.sim import rollout
    kept = run / f"rollout-{task}-seed1000-{a.episodes}-steps{a.inference_steps}.json"
    if kept.exists(): return json.loads(kept.read_text())
    t = time.perf_counter()
    r = rollout(run, episodes=a.episodes, workers=a.workers, seed=1000, progress=False,
                inference_steps=a.inference_steps, **(dict(task_name=task) if conditioned else dict(task=task)))
    e = r.episodes
    got = dict(success=int(e.success.sum()), episodes=len(e), mean_max_reward=float(e.max_reward.mean()),
               outcomes={int(k): bool(v) for k, v in zip(e.seed, e.success)},
               max_reward={int(k): int(v) for k, v in zip(e.seed, e.max_reward)}, wall_s=time.perf_counter() - t)
    kept.write_text(json.dumps(got))
    return got


def policies(a):
    "Single-task, two-task and blind two-task camera policies over training seeds, each rolled out on its tasks."
    import pandas as pd
    from dptoolkit.config import for_store
    from dptoolkit.merge import merge
    from dptoolkit.stats import wilson
    from dptoolkit.train import train
    a.policies.mkdir(parents=True, exist_ok=True)
    tasks = a.tasks.split(",")
    stores = {t: _store(a, t) for t in tasks}
    two = a.policies / "two.zarr"
    if not two.exists(): merge([stores[t] for t in tasks], two, keys=["head_camera", "state", "action"], progress=False)
    plan = []   # (recipe, store name, store, task_embed_dim, the tasks it is rolled out on)
    for r in a.recipes.split(","):
        base, aux = r.removesuffix("+aux"), r.endswith("+aux")
        if aux and not (a.policies / "two-aux.zarr").exists():
            merge([stores[t] for t in tasks], a.policies / "two-aux.zarr", pad=["env_state"],
                  keys=["head_camera", "state", "env_state", "action"], progress=False)
        both = a.policies / "two-aux.zarr" if aux else two
        if base == "single": plan += [(r, t, stores[t], 0, [t]) for t in tasks]
        elif base == "two": plan.append((r, "two", both, 16, tasks))
        elif base == "blind": plan.append((r, "two", both, 0, tasks))
        else: sys.exit(f"tasks.py: --recipes: unknown recipe {r!r} (single, two, blind, each also with +aux)")
    rows = []
    for seed in [int(s) for s in a.train_seeds.split(",")]:
        for rec, name, store, emb, rollout_tasks in plan:
            rd = a.policies / f"{rec}-{name}-seed{seed}"
            if not (rd / "result.json").exists():
                aux = rec.endswith("+aux")
                cfg = for_store(store, name="test", overrides=[
                    f"task.dataset.obs_keys=[head_camera,state{',env_state' if aux else ''}]",
                    f"training.max_steps={a.steps}",
                    f"dataloader.batch_size={a.batch}", f"training.checkpoint_every={a.steps}",
                    f"training.log_every={max(1, a.steps // 20)}", "task.dataset.val_ratio=0.04",
                    f"training.seed={seed}", *recipe(True, size=a.size, aux=aux), "policy.objective=flow",
                    "policy.num_inference_steps=10", f"policy.task_embed_dim={emb}"])
                t = time.perf_counter()
                res = train(cfg, nprocs=1, run_dir=rd, progress=False)
                print(f"{rd.name}: trained in {time.perf_counter() - t:.0f} s, "
                      f"{res.metrics.get('samples_per_s', float('nan')):.0f} samples/s", flush=True)
            done = json.loads((rd / "result.json").read_text())
            for task in rollout_tasks:
                got = _rolled(a, rd, task, emb > 0)
                rows.append(dict(recipe=rec, task=task, seed=seed, success=got["success"], episodes=got["episodes"],
                                 mean_max_reward=got["mean_max_reward"], train_s=done.get("wall_s"),
                                 final_loss=done.get("final_loss")))
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    agg = df.groupby(["recipe", "task"], sort=False).agg(success=("success", "sum"), episodes=("episodes", "sum"),
                                                       seeds=("seed", "nunique"),
                                                       mean_max_reward=("mean_max_reward", "mean"))
    agg["rate"] = agg.success / agg.episodes
    ci = [wilson(s, n) for s, n in zip(agg.success, agg.episodes)]
    agg["low"], agg["high"] = [c[0] for c in ci], [c[1] for c in ci]
    print(df.to_string(index=False)); print(agg.round(3).to_string())
    return dict(runs=rows, pooled=agg.reset_index().to_dict("records"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=100); ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2); ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--tasks", default="transfer_cube,insertion")
    ap.add_argument("--frames", type=Path); ap.add_argument("--json", type=Path)
    ap.add_argument("--frames-of", type=Path, help="with --frames: a --policies run's best held-out episode per task")
    ap.add_argument("--policies", type=Path, help="the policies' part, into this folder (runs and rollouts reused)")
    ap.add_argument("--demos", type=int, default=60)
    ap.add_argument("--demo-noise", default="transfer_cube=0.02,insertion=0",
                    help="DART noise (rad) per task: with 0.02 the insertion expert succeeded in 8 of 60")
    ap.add_argument("--size", default="72,96", help="camera frames H,W")
    ap.add_argument("--train-seeds", default="0,1"); ap.add_argument("--recipes", default="single,two,blind")
    ap.add_argument("--steps", type=int, default=2000); ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--episodes", type=int, default=50); ap.add_argument("--inference-steps", type=int, default=1)
    a = ap.parse_args()
    a.size = tuple(int(x) for x in a.size.split(","))
    if a.frames_of: return policy_frames(a.frames, a.frames_of, a.tasks.split(","), a.episodes, a.inference_steps)
    if a.policies:
        res = dict(args={k: str(v) for k, v in vars(a).items()}, **policies(a))
        if a.json: a.json.write_text(json.dumps(res, indent=1, default=str))
        return
    res = dict(args={k: str(v) for k, v in vars(a).items()}, experts=[expert(t, a) for t in a.tasks.split(",")])
    if a.frames: frames(a.frames)
    if a.json: a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
