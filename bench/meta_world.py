"""Meta-World through the environment door (issue 89).

  --experts             each task's own scripted policy (metaworld.policies) on --episodes seeds through the same
                        GymEnv the rollouts use: success with its Wilson interval, steps to success, env steps/s
  --train DIR           demonstrations from the experts (--demos per task, the 3D Diffusion Policy paper's 10), one
                        task-conditioned low-dim policy over --tasks per training seed (--seeds), --steps steps each
  --rollout-every N     with --train: success while training, each N steps (and the last), --rollout-episodes per
                        task through the watcher (16 DDPM steps, one rollout worker beside the rank)
  --score DIR           every run in DIR played on --episodes seeds per task (16 DDPM steps) through `dpt rollout`:
                        success per task and pooled over training seeds, Wilson intervals
Usage: python bench/meta_world.py --experts [--tasks MT10] [--episodes 10]
       python bench/meta_world.py --train DIR [--tasks a,b|MT10] [--seeds 0,1] [--steps 3000] [--rollout-every N]
       python bench/meta_world.py --score DIR
"""
import argparse, json, subprocess, sys, time
from pathlib import Path

import numpy as np


def _tasks(s):
    from dptoolkit.meta_world import MT10
    return list(MT10) if s == "MT10" else s.split(",")


def experts(tasks, episodes):
    from dptoolkit.environments import METAWORLD_ID
    from dptoolkit.environments import GymEnv
    from dptoolkit.meta_world import scripted_episode, scripted_policy
    from dptoolkit.stats import wilson
    rows = []
    for t in tasks:
        env, pol, t0 = GymEnv(METAWORLD_ID, env_name=t), scripted_policy(t), time.perf_counter()
        eps = [scripted_episode(env, pol, s) for s in range(episodes)]
        secs, steps = time.perf_counter() - t0, sum(e["steps"] for e in eps)
        k = sum(e["success"] for e in eps)
        lo, hi = wilson(k, episodes)
        rows.append(dict(task=t, success=f"{k}/{episodes}", ci=f"[{lo:.0%}–{hi:.0%}]",
                         steps_to_success=int(np.median([e["steps"] for e in eps if e["success"]] or [0])),
                         env_steps_per_s=round(steps / secs)))
        env.close()
        print(json.dumps(rows[-1]), flush=True)
    return rows


TRAIN = ["--config", "pusht_keypoint", "task.dataset.obs_keys=[state]", "policy.task_embed_dim=16",
         "policy.down_dims=[64,128,256]", "dataloader.batch_size=64", "task.dataset.max_train_episodes=null",
         "policy.num_inference_steps=16",   # what the watcher plays (--score passes --steps 16 too)
         "--no-progress"]


def curve(run):
    "The run's success records, one line each: step, pooled success, per task."
    recs = [json.loads(l) for l in open(run / "logs.jsonl") if '"kind": "rollout"' in l]
    for r in recs:
        each = " ".join(f"{t.removesuffix('-v3')} {v['successes']}/{v['episodes']}" for t, v in r.get("tasks", {}).items())
        print(f"{run.name} step {r['step']}: {round(r['success'] * r['episodes'])}/{r['episodes']} "
              f"[{r['success_low']:.0%}–{r['success_high']:.0%}] ({r['rollout_s']:.0f} s) {each}", flush=True)


def train(d, tasks, seeds, steps, demos, every=None, episodes=5):
    d = Path(d)
    store = d / "mw.zarr"
    if not store.exists():
        from dptoolkit.meta_world import metaworld_demos
        print(metaworld_demos(store, tasks, demos, seed=0, progress=False), flush=True)
    for s in seeds:
        t0 = time.time()
        subprocess.run(["dpt", "train", "--data", str(store), "--out", str(d / f"seed{s}"), *TRAIN,
                        f"training.seed={s}", f"training.max_steps={steps}",
                        f"training.checkpoint_every={every or steps}",
                        *([f"eval.rollout_every={every}", f"eval.rollout_episodes={episodes}", "eval.rollout_workers=1"]
                          if every else [])], check=True)
        print(f"seed {s}: {(time.time() - t0) / 60:.1f} min", flush=True)
        if every: curve(d / f"seed{s}")


def score(d, episodes):
    import zarr
    from dptoolkit.stats import wilson
    d = Path(d)
    tasks = list(zarr.open_group(str(d / "mw.zarr"), mode="r").attrs["task_names"])
    tot = {}
    for run in sorted(d.glob("seed*")):
        for t in tasks:
            r = subprocess.run(["dpt", "rollout", str(run), "--env", "Meta-World/MT1", "--task-name", t, "--episodes",
                                str(episodes), "--seed", "1000", "--steps", "16", "--workers", "2", "--no-progress"],
                               capture_output=True, text=True, check=True)
            row = [l for l in r.stdout.splitlines() if l.startswith(run.name + " ")][0].split()
            k = int(row[2])
            tot.setdefault(t, []).append(k)
            print(json.dumps(dict(run=run.name, task=t, success=f"{k}/{episodes}")), flush=True)
    n = len(list(d.glob("seed*")))
    for t, ks in tot.items():
        lo, hi = wilson(sum(ks), n * episodes)
        print(f"{t}: {sum(ks)}/{n * episodes} [{lo:.0%}–{hi:.0%}] over {n} training seeds", flush=True)
    K = sum(map(sum, tot.values()))
    lo, hi = wilson(K, n * episodes * len(tot))
    print(f"pooled: {K}/{n * episodes * len(tot)} [{lo:.0%}–{hi:.0%}]")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experts", action="store_true")
    p.add_argument("--train")
    p.add_argument("--score")
    p.add_argument("--tasks", default="pick-place-v3,drawer-open-v3")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--demos", type=int, default=10)
    p.add_argument("--rollout-every", type=int)
    p.add_argument("--rollout-episodes", type=int, default=5)
    a = p.parse_args()
    if a.experts: experts(_tasks(a.tasks), a.episodes)
    elif a.train: train(a.train, _tasks(a.tasks), [int(s) for s in a.seeds.split(",")], a.steps, a.demos,
                     a.rollout_every, a.rollout_episodes)
    elif a.score: score(a.score, a.episodes)
    else: sys.exit(__doc__)
