"""How much does a policy's initial noise decide its outcome? (issue 66, the steer chapter's premise.) Each of the
50 held-out seeds 1000–1049 is played --draws times with the sampler started from x₁ = s·ε, ε fresh for every chunk,
for each scale s of --scales: per seed, how many draws succeed (never / always / mixed). Then, on the seeds never solved at
s = 1, --held starts every chunk of an episode from the same noise (MODE:SCALE:RHO: `ar` carries it from chunk to chunk
as AR(1) with correlation RHO; RHO 1: one ε for the whole episode): how many of those seeds find a success.
Usage: python bench/rl_noise.py --run RUN [--draws 6] [--scales 1,2] [--held fixed:3:1,fixed:6:1,ar:4:0.9] [--json F]
"""
import argparse, json, time
from pathlib import Path

import numpy as np
import torch

SEEDS = list(range(1000, 1050))


def starts(pol, scale, rho, n, generator):
    "`sample(obs, active)` for play_episodes: each episode's start s·e, e carried as AR(1) with `rho` (0: fresh)."
    state = torch.randn((n, pol.horizon, pol.action_dim), generator=generator)
    def sample(obs, active):
        with torch.no_grad():
            cond, idx = pol.encode_obs(obs), torch.tensor(active)
            fresh = torch.randn((len(active), pol.horizon, pol.action_dim), generator=generator)
            state[idx] = rho * state[idx] + (1 - rho ** 2) ** 0.5 * fresh
            x = pol.objective.sample(lambda x, t: pol.model(x, t, cond), scale * state[idx], pol.num_inference_steps)
            a = pol.to_action(x, obs)
        return a[:, pol.n_obs_steps - 1:pol.n_obs_steps - 1 + pol.n_action_steps]
    return sample


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True); ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--scales", default="1,2"); ap.add_argument("--held", default="fixed:3:1,fixed:6:1,ar:4:0.9")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    from dptoolkit.episodes import Envs
    from dptoolkit.lockstep import play_episodes
    from dptoolkit.evaluate import load_policy
    pol, _ = load_policy(a.run)
    envs, res, D = Envs(pol.eval()), dict(run=str(a.run), draws=a.draws, fresh={}, held={}), a.draws
    for s in map(float, a.scales.split(",")):
        t, per = time.perf_counter(), []
        for i in range(0, len(SEEDS), 10):   # 10 seeds × D draws stepped together
            eps = play_episodes(pol, [("transfer_cube", x) for x in SEEDS[i:i + 10]], D,
                                starts(pol, s, 0.0, 10 * D, torch.Generator().manual_seed(i)), envs, 400)
            per += np.array([e["success"] for e in eps]).reshape(10, D).sum(1).tolist()
        per = np.array(per)
        res["fresh"][s] = per.tolist()
        print(f"x₁ = {s}·ε, fresh per chunk: never {(per == 0).sum()}, always {(per == D).sum()}, mixed "
              f"{((per > 0) & (per < D)).sum()} of {len(SEEDS)} seeds; {per.sum()}/{per.size * D} episodes "
              f"({time.perf_counter() - t:.0f} s)", flush=True)
    never = [x for x, k in zip(SEEDS, res["fresh"].get(1.0, [])) if k == 0]
    for spec in filter(None, a.held.split(",")):
        _, s, rho = spec.split(":")   # the mode is a label: RHO says fresh, AR(1) or held
        play = starts(pol, float(s), float(rho), 4 * len(never), torch.Generator().manual_seed(1))
        eps = play_episodes(pol, [("transfer_cube", x) for x in never], 4, play, envs, 400)
        ok = np.array([e["success"] for e in eps]).reshape(len(never), 4).sum(1)
        res["held"][spec] = ok.tolist()
        print(f"{spec}: {(ok > 0).sum()} of the {len(never)} never-solved seeds found a success; {ok.sum()}/"
              f"{ok.size * 4} episodes", flush=True)
    if a.json: a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__": main()
