"""Diffusion Policy's own benchmark (issue 79): PushT from its authors' store, played in gym-pusht and scored as the
paper scores it (envs chapter: diffusion_policy's 50 test seeds 100000 …, 300 steps, score = an episode's highest
reward = coverage / 0.95 clipped to 1, success = coverage > 0.95).

  --replay              the store's 206 episodes replayed from their first states with their actions: how many pass
                        through the store's own states exactly, and the score the human demonstrations reach
  --train DIR           keypoint policies (packaged pusht_keypoint: horizon 16, 2 observation steps, 8 actions, DDPM
                        100, EMA, 90 of the 206 demonstrations) for --seeds, --steps steps each at --batch, the U-Net
                        --down-dims (the paper's [256, 512, 1024] is 65.8 M parameters; this CPU trains a smaller one),
                        one checkpoint every --every steps; a run already there is continued, not redone
  --score DIR           every checkpoint of every run in DIR played on the --episodes test seeds (each checkpoint once:
                        its record stays in the run's logs.jsonl), then the paper's two figures per run (the best
                        checkpoint's score, the mean of the last --last checkpoints') and pooled over training seeds
  --sampling RUN        the final policy's cost per action chunk (one decision, batch 1) and score at --steps-list
                        denoising steps (DDPM's own 100 and fewer)
  --chunk-cost RUN:STEPS ...
                        ms per action chunk of each run at each number of steps, timed in one process (DDPM's and
                        flow's costs measured side by side)
  --recipe-cost DIR     a few steps of each packaged PushT config at the paper's size and batch: what its full recipe
                        (5000 / 3050 epochs) would take on this machine
  --speedup             dpt train at 1 and 2 processes on the store (60 steps each, interleaved twice): samples/s
                        from rank-0 logs
Usage: python bench/pusht.py --replay | --train DIR [--seeds 0,1] [--steps 12000] | --score DIR | --sampling RUN |
       --speedup [--store PATH] [--json F]
"""
import argparse, json, subprocess, sys, time
from pathlib import Path

STORE = Path(__file__).resolve().parents[2] / "shared" / "data" / "pusht" / "pusht_cchi_v7_replay.zarr"
PUSHT = "gym_pusht/PushT-v0"


def replay(a):
    from dptoolkit.envs import replay_pusht
    t = time.perf_counter()
    r = replay_pusht(a.store)
    out = dict(episodes=len(r), exact=int(r["exact"].sum()), within_0_5px=int((r["max_error_px"] < 0.5).sum()),
               worst_px=float(r["max_error_px"].max()), score=float(r["score"].mean()),
               score_min=float(r["score"].min()), success=int(r["success"].sum()), seconds=time.perf_counter() - t,
               not_exact={int(e): round(float(v), 4) for e, v in r["max_error_px"][~r["exact"]].items()})
    print(f"replay: {out['exact']}/{out['episodes']} episodes pass through the store's states within 1e-3 px "
          f"({out['within_0_5px']} within 0.5 px; worst {out['worst_px']:.3f} px); the demonstrations' score "
          f"{out['score']:.3f} (min {out['score_min']:.3f}), {out['success']} reach success; {out['seconds']:.0f} s")
    return out


def train(a):
    out = Path(a.train)
    for s in a.seeds:
        run = out / f"kp_s{s}"
        done = (run / "result.json").exists() and json.loads((run / "result.json").read_text()).get("completed")
        if done: continue
        cmd = ["dpt", "train", "--data", str(a.store), "--nprocs", "1", "--out", str(run),
               f"training.max_steps={a.steps}", f"policy.down_dims={a.down_dims}", f"dataloader.batch_size={a.batch}",
               f"training.cpu_threads={a.threads}", f"training.checkpoint_every={a.every}", "training.keep_checkpoints=100",
               "training.log_every=100", f"training.seed={s}"] + (["--resume"] if run.exists() else [])
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


def _scored(run) -> dict:
    recs = [json.loads(l) for l in open(run / "logs.jsonl") if '"kind": "rollout"' in l]
    return {r["step"]: r for r in recs if r.get("task") == PUSHT and r.get("episodes") == ARGS.episodes}


def score(a):
    import numpy as np
    from dptoolkit.success import rollout_checkpoint   # through the one door
    from dptoolkit.stats import wilson
    rows = []
    for run in sorted(p for p in Path(a.score).iterdir() if (p / "logs.jsonl").exists()):
        have = _scored(run)
        for ck in sorted(run.glob("checkpoints/step_*"), key=lambda p: int(p.name.split("_")[-1])):
            step = int(ck.name.split("_")[-1])
            if step in have: continue
            t = time.perf_counter()
            rec = rollout_checkpoint(ck, PUSHT, a.episodes, 100000, a.workers)
            print(f"{run.name} step {step}: score {rec['score']:.3f} [{rec['score_low']:.3f}–{rec['score_high']:.3f}], "
                  f"success {rec['success']:.0%} [{rec['success_low']:.0%}–{rec['success_high']:.0%}] "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
        recs = sorted(_scored(run).values(), key=lambda r: r["step"])
        if not recs: continue
        best = max(recs, key=lambda r: r["score"])
        last = recs[-a.last:]
        rows.append(dict(run=run.name, checkpoints=[r["step"] for r in recs], scores=[round(r["score"], 3) for r in recs],
                         best_step=best["step"], best=best["score"], last_mean=float(np.mean([r["score"] for r in last])),
                         final=recs[-1]["score"], final_success=recs[-1]["success"],
                         final_outcomes=recs[-1]["outcomes"], train_s=recs[-1].get("train_s")))
    if rows:
        k = sum(sum(r["final_outcomes"]) for r in rows)
        n = sum(len(r["final_outcomes"]) for r in rows)
        lo, hi = wilson(k, n)
        pooled = dict(best=float(np.mean([r["best"] for r in rows])), last_mean=float(np.mean([r["last_mean"] for r in rows])),
                      final=float(np.mean([r["final"] for r in rows])), success=k / n, success_low=lo, success_high=hi,
                      seeds=[r["run"] for r in rows])
        for r in rows:
            print(f"{r['run']}: scores {r['scores']} at {r['checkpoints']}; best {r['best']:.3f} (step {r['best_step']}), "
                  f"mean of the last {min(a.last, len(r['scores']))} {r['last_mean']:.3f}; train {r['train_s'] or 0:.0f} s")
        print(f"pooled over {len(rows)} training seeds: best {pooled['best']:.3f}, last mean {pooled['last_mean']:.3f}, "
              f"final {pooled['final']:.3f}, final success {k}/{n} = {k / n:.0%} [{lo:.0%}–{hi:.0%}]")
        return dict(runs=rows, pooled=pooled)


def sampling(a):
    import torch
    from dptoolkit.evaluate import load_policy
    from dptoolkit.envs import rollout
    from dptoolkit.protocol import predict
    pol = load_policy(a.sampling)[0]
    obs = {k: torch.zeros(1, pol.n_obs_steps, pol.obs_encoder.low_dim[k]) for k in pol.low_dim_keys}
    rows = []
    for steps in a.steps_list:
        g = torch.Generator().manual_seed(0)
        predict(pol, obs, g, steps)
        t = time.perf_counter()
        for _ in range(5): predict(pol, obs, g, steps)
        ms = (time.perf_counter() - t) / 5 * 1e3
        r = rollout(a.sampling, PUSHT, episodes=a.episodes, workers=a.workers, seed=100000, inference_steps=steps,
                    progress=False)
        s = r.summary()
        rows.append(dict(steps=steps, ms_per_chunk=ms, score=s["score"], score_low=s["score_low"],
                         score_high=s["score_high"], success=s["success_rate"], successes=s["successes"]))
        print(f"{steps:3d} steps: {ms:.1f} ms per chunk (batch 1, {torch.get_num_threads()} threads); score "
              f"{s['score']:.3f} [{s['score_low']:.3f}–{s['score_high']:.3f}], success {s['successes']}/{s['episodes']}",
              flush=True)
    return rows


def chunk_cost(a):
    """Each RUN:steps,... of --chunk-cost timed in this one process, one after another: ms per action chunk (one
    decision, batch 1) at each number of denoising steps, so DDPM's and flow's costs share the machine's state."""
    import torch
    from dptoolkit.evaluate import load_policy
    from dptoolkit.protocol import predict
    rows = []
    for spec in a.chunk_cost:
        run, steps = spec.rsplit(":", 1)
        pol = load_policy(run)[0]
        obs = {k: torch.zeros(1, pol.n_obs_steps, pol.obs_encoder.low_dim[k]) for k in pol.low_dim_keys}
        for n in map(int, steps.split(",")):
            g = torch.Generator().manual_seed(0)
            predict(pol, obs, g, n)
            t = time.perf_counter()
            for _ in range(20): predict(pol, obs, g, n)
            ms = (time.perf_counter() - t) / 20 * 1e3
            rows.append(dict(run=run, objective=type(pol.objective).__name__, steps=n, ms_per_chunk=ms))
            print(f"{Path(run).name} ({rows[-1]['objective']}) {n:3d} steps: {ms:.1f} ms per chunk (batch 1, "
                  f"{torch.get_num_threads()} threads)", flush=True)
    return rows


def recipe_cost(a):
    """What the paper's full recipes would cost on this machine: a few steps of each packaged config at its own size
    and batch (dpt train, 2 threads, rank-0 logs), then its epochs × steps per epoch at that speed."""
    rows = []
    for name, epochs in (("pusht_keypoint", 5000), ("pusht_image", 3050)):
        run = Path(a.recipe_cost) / name
        subprocess.run(["dpt", "train", "--config", name, "--data", str(a.store), "--nprocs", "1", "--out", str(run),
                        "--no-progress", "training.max_steps=8", "training.log_every=4", "training.checkpoint_every=0",
                        "training.cpu_threads=2"], check=True, capture_output=True)
        logs = [json.loads(l) for l in open(run / "logs.jsonl") if '"samples_per_s"' in l]
        sps, batch = logs[-1]["samples_per_s"], logs[-1]["global_batch"]
        windows = json.loads((run / "result.json").read_text()).get("train_windows")
        per_epoch = (windows or 10808) // batch
        hours = epochs * per_epoch * batch / sps / 3600
        rows.append(dict(config=name, samples_per_s=sps, batch=batch, steps=epochs * per_epoch, cpu_hours=hours))
        print(f"{name}: {sps:.1f} samples/s at batch {batch} on 2 cores → the paper's {epochs} epochs "
              f"({epochs * per_epoch:,} steps) ≈ {hours:,.0f} h here", flush=True)
    return rows


def speedup(a):
    from dptoolkit.config import for_store
    from dptoolkit.sweep import sweep
    cfg = for_store(a.store, [f"policy.down_dims={a.down_dims}"])
    import tempfile
    out = Path(tempfile.mkdtemp(prefix="dpt-pusht-sweep-"))     # never ./runs of wherever the script is started
    df = sweep(cfg, (1, 2), steps=60, per_device_batch=a.batch, repeats=2, out_dir=out, progress=False)
    print(df.to_string())
    return df.reset_index().to_dict("records")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default=str(STORE))
    p.add_argument("--replay", action="store_true")
    p.add_argument("--train")
    p.add_argument("--score")
    p.add_argument("--sampling")
    p.add_argument("--speedup", action="store_true")
    p.add_argument("--recipe-cost", metavar="DIR")
    p.add_argument("--chunk-cost", nargs="+", metavar="RUN:STEPS", help="e.g. runs/kp_s0:100,16 runs/flow:10,1")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1])
    p.add_argument("--steps", type=int, default=12000)
    p.add_argument("--steps-list", type=lambda s: [int(x) for x in s.split(",")], default=[100, 16, 8])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--down-dims", default="[64,128,256]")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--every", type=int, default=2000)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--last", type=int, default=3)
    p.add_argument("--json")
    ARGS = a = p.parse_args()
    res = {}
    if a.replay: res["replay"] = replay(a)
    if a.train: train(a)
    if a.score: res["score"] = score(a)
    if a.sampling: res["sampling"] = sampling(a)
    if a.speedup: res["speedup"] = speedup(a)
    if a.recipe_cost: res["recipe_cost"] = recipe_cost(a)
    if a.chunk_cost: res["chunk_cost"] = chunk_cost(a)
    if a.json: Path(a.json).write_text(json.dumps(res, indent=1, default=str))
