"""Why expert iteration levels off, and what `rl.explore` changes (issue 66): (1) each run's policy (--runs NAME=RUN,...)
plays the 50 held-out seeds (1000-1049) --draws times with the deterministic sampler it deploys, each time with another
generator seed: how many seeds succeed every time, fail every time, or are mixed (is the outcome the state's or the
draw's?); (2) the first run's always-failing seeds, --tries times each, through `smooth_noise` at each --sigmas
(radians on the arm joints, the executed actions are what `rl.explore` keeps): how many of them find a success.
Usage: python bench/rl_explore.py --runs bc0=RUN[,r1=RUN ...] [--draws 4] [--sigmas 0.01,0.02,0.05] [--tries 4]
       [--json F]
"""
import argparse, json
from pathlib import Path

import numpy as np
import torch

HELD = list(range(1000, 1050))


def main():
    from dptoolkit.episodes import Envs
    from dptoolkit.lockstep import play_episodes
    from dptoolkit.evaluate import load_policy
    from dptoolkit.iterate import smooth_noise
    from dptoolkit.protocol import predict
    from dptoolkit.rl import success_on
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", required=True, help="NAME=RUN,...: the first one's failing seeds are explored")
    ap.add_argument("--draws", type=int, default=4); ap.add_argument("--tries", type=int, default=4)
    ap.add_argument("--sigmas", default="0.01,0.02,0.05"); ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    runs = dict(r.split("=", 1) for r in a.runs.split(","))
    res, first = dict(outcomes={}, explore={}), None
    for name, run in runs.items():
        pol, _ = load_policy(run)
        m = np.array([success_on(pol, HELD, seed=g) for g in range(a.draws)])
        per = m.sum(0)
        row = dict(per_draw=m.sum(1).tolist(), always=int((per == a.draws).sum()), never=int((per == 0).sum()),
                   mixed=int(((per > 0) & (per < a.draws)).sum()), never_seeds=[s for s, k in zip(HELD, per) if k == 0])
        res["outcomes"][name] = row
        print(f"{name}: successes per draw {row['per_draw']}; seeds that succeed every time {row['always']}, "
              f"never {row['never']}, mixed {row['mixed']}", flush=True)
        if first is None: first = (pol, row["never_seeds"])
    pol, never = first
    envs = Envs(pol)
    for sigma in [float(s) for s in a.sigmas.split(",")]:
        g = torch.Generator().manual_seed(0)
        deployed = lambda obs, active: predict(pol, obs, g)["action"]
        eps = play_episodes(pol, [("transfer_cube", s) for s in never], a.tries, smooth_noise(deployed, sigma, g), envs)
        ok = np.array([e["success"] for e in eps]).reshape(len(never), a.tries)
        res["explore"][sigma] = dict(successes=int(ok.sum()), episodes=int(ok.size), seeds_found=int((ok.sum(1) > 0).sum()),
                                     seeds=len(never))
        print(f"σ = {sigma}: {ok.sum()}/{ok.size} episodes succeed; {(ok.sum(1) > 0).sum()} of the {len(never)} "
              f"never-solved seeds find a success", flush=True)
    if a.json: a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
