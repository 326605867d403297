"""Rollout throughput through the one lockstep loop against the loops it replaced, in one run (issue 89).

The same untrained policies (made from one torch seed, so both trees sample the same chunks) play the same seeds for a
fixed number of steps (an untrained policy never succeeds: every episode is max_steps long) in ALOHA
(`sim.rollout_episode`, one episode per call, as `dpt rollout` plays it), PushT and Meta-World (`envs.env_episodes`,
a group of seeds in lockstep), once with this tree and once with `--before` (a git ref: before `lockstep`, each rollout
door had a loop of its own), alternating, `--repeats` times. Each figure is episodes per minute of one worker
process; the ratio is this tree's over the ref's (>= 1: not slower). The episodes' rows must also agree: one loop
plays what the three played.

Usage: python bench/rollout_loops.py [--before 2e755d0] [--repeats 5] [--episodes 4] [--steps 100]
"""
import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLAY = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(1)
from dptoolkit.policy import DiffusionPolicy
env, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
kw = dict(horizon=16, n_obs_steps=2, n_action_steps=8, down_dims=(32, 64), objective="flow", num_inference_steps=8)
if env == "aloha":
    from dptoolkit.sim import rollout_episode
    pol = DiffusionPolicy(14, {"state": (14,), "env_state": (7,)}, **kw).eval()
    rollout_episode(pol, "transfer_cube", 0, max_steps=8)                      # warm: the model and the kernels
    t0 = time.perf_counter()
    rows = [rollout_episode(pol, "transfer_cube", s, max_steps=steps) for s in range(n)]
else:
    from dptoolkit.envs import env_episodes
    from dptoolkit.environments import METAWORLD_ID, PUSHT_ID
    if env == "pusht":
        pol, eid, ekw = DiffusionPolicy(2, {"agent_pos": (2,)}, **kw).eval(), PUSHT_ID, None
    else:
        pol, eid, ekw = DiffusionPolicy(4, {"state": (39,)}, **kw).eval(), METAWORLD_ID, {"env_name": "pick-place-v3"}
    env_episodes(pol, eid, [0], max_steps=8, env_kwargs=ekw)
    t0 = time.perf_counter()
    rows = env_episodes(pol, eid, range(100000, 100000 + n), max_steps=steps, env_kwargs=ekw)
secs = time.perf_counter() - t0
keep = ("seed", "success", "steps", "max_reward", "ret", "unstable")
print(json.dumps(dict(seconds=secs, steps=sum(r["steps"] for r in rows), rows=[{k: r[k] for k in keep} for r in rows])))
"""


def play(tree: Path, env: str, n: int, steps: int) -> dict:
    e = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    r = subprocess.run([sys.executable, "-c", PLAY, env, str(n), str(steps)], capture_output=True, text=True, env=e,
                       cwd=tempfile.gettempdir())
    if r.returncode: sys.exit(f"{env} in {tree}: {r.stderr[-1500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="2e755d0")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--envs", default="aloha,pusht,metaworld")
    a = ap.parse_args()
    old = Path(tempfile.mkdtemp(prefix="loops_before_"))
    subprocess.run(f"git -C {ROOT} archive {a.before} dptoolkit | tar -x -C {old}", shell=True, check=True)
    out = []
    for env in a.envs.split(","):
        rate = {"before": [], "now": []}
        rows = {}
        for _ in range(a.repeats):
            for name, tree in (("before", old), ("now", ROOT)):
                r = play(tree, env, a.episodes, a.steps)
                rate[name].append(a.episodes / r["seconds"] * 60)
                rows[name] = r["rows"]
        same = rows["before"] == rows["now"]
        med = {k: sorted(v)[len(v) // 2] for k, v in rate.items()}
        best = {k: max(v) for k, v in rate.items()}   # the least disturbed run of each: a shared machine only slows
        out.append(dict(env=env, episodes=a.episodes, steps=a.steps, before_eps_per_min=round(med["before"], 1),
                        now_eps_per_min=round(med["now"], 1), ratio=round(med["now"] / med["before"], 3),
                        best_ratio=round(best["now"] / best["before"], 3),
                        same_episodes=same, runs={k: [round(x, 1) for x in v] for k, v in rate.items()}))
        print(json.dumps(out[-1]), flush=True)
        if not same: print(f"  {env}: the rows differ\n  before {rows['before']}\n  now    {rows['now']}", flush=True)


if __name__ == "__main__":
    main()
