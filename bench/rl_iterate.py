"""Expert iteration on ALOHA transfer-cube (issue 66's other road): the policy plays --episodes episodes with the
deterministic sampler it deploys (distinct seeds from --seed, far from the held-out 1000–1049), its *successful* episodes
(per step: qpos, env_state, the action it executed) join the demonstrations, and BC is trained again from scratch with
bench/rl.py's recipe; repeated for --rounds rounds, each round's policy judged on the same 50 held-out seeds (95 %
Wilson). A binary success reward and nothing else, like RIPT's; no likelihood, so any policy on the contract could do it.
Starts from bench/rl.py's BC run and its 8-demonstration store (--bc RUN, --demos STORE).
Usage: python bench/rl_iterate.py --bc RUN --demos STORE --out DIR [--rounds 2] [--episodes 640] [--seed 20000]
       [--bc-steps 1000] [--json F]
"""
import argparse, collections, json, sys, time
from pathlib import Path

import numpy as np
import torch


def record(policy, seeds, batch: int = 32, max_steps: int = 400) -> list:
    "Episodes of `policy` from `seeds`, `batch` stepped together: per step the observation and the action executed."
    from dptoolkit.protocol import predict
    from dptoolkit.rl import Envs, _window
    from dptoolkit.sim import SUCCESS_REWARD, SimUnstable
    envs, out = Envs(policy), []
    for b0 in range(0, len(seeds), batch):
        ss = seeds[b0:b0 + batch]
        env = envs.get("transfer_cube", len(ss))
        hists = [collections.deque([e.reset(s)] * policy.n_obs_steps, maxlen=policy.n_obs_steps)
                 for e, s in zip(env, ss)]
        traj = [dict(state=[], env_state=[], action=[], success=False, steps=0, dead=False) for _ in ss]
        g, active = torch.Generator().manual_seed(b0), list(range(len(ss)))
        while active:
            acts = predict(policy, _window(policy, [hists[i] for i in active], None, "cpu"), g)["action"].numpy()
            for i, chunk in zip(active, acts):
                tr = traj[i]
                for a in chunk:
                    o = hists[i][-1]
                    try: o2, r = env[i].step(a)
                    except SimUnstable:
                        tr["dead"] = True
                        break
                    for k, v in (("state", o["qpos"]), ("env_state", o["env_state"]), ("action", a)): tr[k].append(v)
                    tr["steps"] += 1
                    hists[i].append(o2)
                    if r >= SUCCESS_REWARD: tr["success"] = True
                    if tr["success"] or tr["steps"] >= max_steps: break
            active = [i for i in active if not (traj[i]["dead"] or traj[i]["success"] or traj[i]["steps"] >= max_steps)]
        out += traj
    return out


def grow(base, trajs, dest):
    "The store `base` plus the successful episodes of `trajs`, written to `dest`."
    from dptoolkit.store import open_store, write_store
    g = open_store(base)
    data = {k: [g[f"data/{k}"][:]] for k in ("state", "env_state", "action")}
    ends = list(g["meta/episode_ends"][:])
    for tr in trajs:
        for k in data: data[k].append(np.asarray(tr[k], dtype=np.float32))
        ends.append(ends[-1] + tr["steps"])
    write_store(dest, {k: np.concatenate(v).astype(np.float32) for k, v in data.items()}, ends,
                attrs=dict(g.attrs), overwrite=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bc", type=Path, required=True); ap.add_argument("--demos", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True); ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=640); ap.add_argument("--seed", type=int, default=20000)
    ap.add_argument("--bc-steps", type=int, default=1000); ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from rl import BC
    from dptoolkit.config import for_store
    from dptoolkit.evaluate import load_policy
    from dptoolkit.rl import success_on
    from dptoolkit.stats import wilson
    from dptoolkit.train import train
    held = list(range(1000, 1050))
    run, store, rows = a.bc, a.demos, []
    pol, _ = load_policy(run)
    k0 = sum(success_on(pol, held))
    print(f"round 0 (BC): {k0}/50", flush=True)
    for r in range(1, a.rounds + 1):
        t = time.perf_counter()
        seeds = list(range(a.seed + (r - 1) * a.episodes, a.seed + r * a.episodes))
        trajs = record(pol, seeds)
        ok = [tr for tr in trajs if tr["success"]]
        play_s = time.perf_counter() - t
        a.out.mkdir(parents=True, exist_ok=True)
        grow(store, ok, a.out / f"round{r}.zarr")
        store, run = a.out / f"round{r}.zarr", a.out / f"bc-round{r}"
        train(for_store(store, name="test", overrides=BC + [f"training.max_steps={a.bc_steps}",
                                                            f"training.checkpoint_every={a.bc_steps}",
                                                            "training.seed=0"]), nprocs=1, run_dir=run, progress=False)
        pol, _ = load_policy(run)
        k = sum(success_on(pol, held))
        lo, hi = wilson(k, 50)
        rows.append(dict(round=r, played=len(trajs), successes_played=len(ok), held_out=k, low=lo, high=hi,
                         play_s=play_s, round_s=time.perf_counter() - t))
        print(f"round {r}: played {len(trajs)} ({len(ok)} successful, added); BC again: {k}/50 = {k / 50:.0%} "
              f"[{lo:.0%}–{hi:.0%}] ({rows[-1]['round_s']:.0f} s)", flush=True)
        if a.json: a.json.write_text(json.dumps(dict(before=k0, rounds=rows), indent=1))


if __name__ == "__main__":
    main()
