"""What holds expert iteration's plateau (issue 66).
Where on the table the policy fails, what a scripted demonstration is worth against the policy's own successes, and
whether a round's store was under-trained. --curve N,N: BC (bench/rl.py's recipe, 1000 steps) on N scripted DART
demonstrations (seeds 0 … N−1, σ = 0.02), for each of --seeds; --runs name=RUN,...: runs made elsewhere (the BC runs,
a round's BC); --longer name=STORE:STEPS[:SEED],...: BC again on a store (a round's data.zarr) for STEPS steps
(training seed SEED, default 0); --relabel STORE: from one expert- iteration round's store (`rounds/1/data.zarr`: the
demonstrations, then the successes the round kept), stores that keep the demonstrations and change what was added,
each cloned for 1000 steps (seed 0): `expert-labels` (the expert's DART episode, σ = 0.02, on each state the round
kept a success of), `expert-labels-no-dart` (σ = 0), `edge-only` (only the added episodes whose cube starts at the
edge), `edge-3x` (those repeated three times), `fast-half` (only the added episodes that succeeded within the median
length); --fit name=RUN,...: those runs (and the --relabel ones) played once on each of the round's own states that it
kept a success of: does a policy solve the states it was trained on? Every policy is judged on the same 50 held-out
seeds 1000–1049 with the deterministic sampler it deploys, split by where the cube starts: the table's far rows and
left edge (`EDGE`) against the rest (95 % Wilson; pooled over runs of one name).
Usage: python bench/rl_plateau.py --out DIR [--curve 16,32] [--seeds 0,1] [--runs bc0=RUN,...]
       [--longer r1-3k=STORE:3000:0,...] [--bc-extra KEY=VALUE]
       [--relabel ROUND_STORE [--fit name=RUN,...]] [--json F]
"""
import argparse, json, time
from pathlib import Path

import numpy as np

HELD = list(range(1000, 1050))
EDGE = dict(y_min=0.565, x_max=0.03)     # cube start y ≥ 0.565 (far from the arms) or x ≤ 0.03 (the left edge)
from rl import BC                         # bench/rl.py's BC recipe, the one the RL runs start from


def at_edge(seeds) -> set:
    "Those of `seeds` whose cube starts at the table's far rows or its left edge."
    from dptoolkit.aloha import AlohaSim
    env = AlohaSim("transfer_cube")
    pos = {s: env.reset(s)["env_state"][:2] for s in seeds}
    return {s for s, (x, y) in pos.items() if y >= EDGE["y_min"] or x <= EDGE["x_max"]}


def judge(run, seeds=HELD) -> list:
    from dptoolkit.evaluate import load_policy
    from dptoolkit.rl import success_on
    pol, _ = load_policy(run)
    return [bool(x) for x in success_on(pol, seeds)]


def bc(store, run, steps, seed, extra=()):
    from dptoolkit.config import for_store
    from dptoolkit.train import train
    if not (Path(run) / "result.json").exists():
        train(for_store(store, name="test", overrides=BC + list(extra) + [f"training.max_steps={steps}",
              f"training.checkpoint_every={steps}", f"training.seed={seed}"]), nprocs=1, run_dir=run, progress=False)
    return run


def relabelled(src, out) -> dict:
    "The --relabel stores from a round's store `src` (see the docstring), written under `out`: {name: path}."
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial
    from dptoolkit import aloha as sim   # the simulator and its experts (the aloha chapter)
    from dptoolkit.store import open_store, write_store
    names = ("edge-only", "edge-3x", "fast-half", "expert-labels", "expert-labels-no-dart")
    paths = {n: out / f"relabel-{n}.zarr" for n in names}
    if all(p.exists() for p in paths.values()): return paths          # a rerun: made already
    g = open_store(src)
    attrs, added = dict(g.attrs), dict(g.attrs)["iterate"]["seeds"]
    ends = g["meta/episode_ends"][:]
    starts, nb = np.r_[0, ends[:-1]], len(ends) - len(added)
    eps = [{k: g[f"data/{k}"][a:b] for k in g["data"].keys()} for a, b in zip(starts, ends)]
    edge = at_edge(set(added))
    med = np.median(ends[nb:] - starts[nb:])
    picks = {"edge-only": [i for i, s in enumerate(added) if s in edge],
             "edge-3x": [j for i, s in enumerate(added) for j in [i] * (3 if s in edge else 1)],
             "fast-half": [i for i in range(len(added)) if ends[nb + i] - starts[nb + i] <= med]}
    chosen = {name: eps[:nb] + [eps[nb + i] for i in idx] for name, idx in picks.items()}
    with ProcessPoolExecutor(2) as ex:
        for name, noise in (("expert-labels", 0.02), ("expert-labels-no-dart", 0.0)):
            runs = ex.map(partial(sim.expert_episode, "transfer_cube", noise=noise), sorted(set(added)))
            chosen[name] = eps[:nb] + [{k: e["arrays"][k] for k in eps[0]} for e in runs if e["success"]]
    for name, episodes in chosen.items():
        if not paths[name].exists():
            write_store(paths[name], {k: np.concatenate([e[k] for e in episodes]) for k in eps[0]},
                        np.cumsum([len(e["action"]) for e in episodes]), attrs={"sim": attrs["sim"]})
    return paths


def row(name, outcomes: list, edge: set) -> str:
    from dptoolkit.stats import wilson
    def ci(k, n):
        lo, hi = wilson(k, n)
        return f"{k}/{n} = {k / n:.0%} [{lo:.0%}–{hi:.0%}]"
    e = [o[i] for o in outcomes for i, s in enumerate(HELD) if s in edge]
    r = [o[i] for o in outcomes for i, s in enumerate(HELD) if s not in edge]
    per = " + ".join(str(sum(o)) for o in outcomes)
    return f"| {name} | {per} | {ci(sum(map(sum, outcomes)), len(HELD) * len(outcomes))} | {ci(sum(e), len(e))} | " \
           f"{ci(sum(r), len(r))} |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True); ap.add_argument("--curve", default="")
    ap.add_argument("--seeds", default="0,1"); ap.add_argument("--runs", default="")
    ap.add_argument("--longer", default=""); ap.add_argument("--relabel", type=Path)
    ap.add_argument("--fit", default=""); ap.add_argument("--json", type=Path)
    ap.add_argument("--bc-extra", action="append", default=[], help="a config override for --longer's BC runs")
    a = ap.parse_args()
    from dptoolkit.aloha import make_demos
    a.out.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", flush=True)
    edge = at_edge(HELD)
    res = dict(edge=sorted(edge), runs={})
    jf = a.json or a.out / "plateau.json"
    if jf.exists(): res["runs"] = json.loads(jf.read_text())["runs"]      # a rerun judges only what is new

    def add(name, run):
        key = f"{name}:{run}"
        if key not in res["runs"]:
            t = time.perf_counter()
            res["runs"][key] = judge(run)
            log(f"{name} ({run}): {sum(res['runs'][key])}/50 in {time.perf_counter() - t:.0f} s")
            jf.write_text(json.dumps(res, indent=1))
    for spec in filter(None, a.runs.split(",")):
        name, run = spec.split("=", 1)
        add(name, run)
    for n in (int(x) for x in a.curve.split(",") if x):
        store = a.out / f"demos{n}.zarr"
        if not store.exists(): make_demos(n=n, out=store, workers=2, progress=False, noise=0.02)
        for s in map(int, a.seeds.split(",")):
            t = time.perf_counter()
            run = bc(store, a.out / f"bc-demos{n}-s{s}", 1000, s)
            log(f"BC on {n} demonstrations, seed {s}: {time.perf_counter() - t:.0f} s")
            add(f"{n} demonstrations", str(run))
    for spec in filter(None, a.longer.split(",")):
        name, rest = spec.split("=", 1)
        store, steps, *seed = rest.split(":")
        t = time.perf_counter()
        seed = int(seed[0]) if seed else 0
        run = bc(store, a.out / f"longer-{name}-s{seed}", int(steps), seed, a.bc_extra)
        log(f"{name}: BC {steps} steps on {store}: {time.perf_counter() - t:.0f} s")
        add(name, str(run))
    stores = relabelled(a.relabel, a.out) if a.relabel else {}
    for name, store in stores.items():
        t = time.perf_counter()
        run = bc(store, a.out / f"relabel-{name}-s0", 1000, 0)
        log(f"{name}: BC 1000 steps on {store}: {time.perf_counter() - t:.0f} s")
        add(name, str(run))
    if a.relabel and a.fit:
        from dptoolkit.store import open_store
        states = sorted(set(dict(open_store(a.relabel).attrs)["iterate"]["seeds"]))
        at = at_edge(states)
        runs = [spec.split("=", 1) for spec in a.fit.split(",")] + [(n, str(a.out / f"relabel-{n}-s0"))
                                                                    for n in stores]
        res["fit"] = {}
        print(f"the round's states with a kept success: {len(states)}, {len(at)} at the edge")
        for name, run in runs:
            o = judge(run, states)
            e = sum(x for s, x in zip(states, o) if s in at)
            res["fit"][name] = o
            print(f"| {name} | {sum(o)}/{len(states)} | {e}/{len(at)} |", flush=True)
        jf.write_text(json.dumps(res, indent=1))
    names = {}
    for key, o in res["runs"].items(): names.setdefault(key.split(":", 1)[0], []).append(o)
    print(f"held-out seeds at the edge: {len(edge)} of {len(HELD)}")
    print("| policy | per run | all 50 seeds | edge seeds | the rest |\n|---|---|---|---|---|")
    for name, outs in names.items(): print(row(name, outs, edge))


if __name__ == "__main__":
    main()
