"""Policy families on ALOHA transfer-cube (issue 47): U-Net + DDPM (issue 25 / 36's recipe, predicting the clean
sample), U-Net + flow matching (pi0's velocity target; `-x`: predicting the clean chunk) and transformer + flow,
each trained with every training seed of --seeds on the same demonstrations and rolled out on the same held-out
episode seeds (1000 …). Prints, per family: training seconds and samples/s, the milliseconds
to sample one action chunk (batch 1, the deployed case), the error of its sampled actions on held-out windows
(`dpt eval`'s MAE, data units), success pooled over the training seeds with its 95 % Wilson
interval and each seed's count; and the sampling speed-up of each family over U-Net + DDPM measured in the same run.
Variant: low-dim (`state` + `env_state`) by default, `--camera [--aux]` for issue 36's pixel recipe (top camera + qpos).
A run already trained (and rolled out) into --out is reused: a study longer than a session is run a (family, seed)
at a time into one --out, then once more over all of them for the table. `--also-steps 1,2`: each flow run is timed and
rolled out again sampling in that many Euler steps (the same weights; rows `FAMILY/N`).
Usage: python bench/policies.py [--camera [--aux]] [--demos 50] [--steps 1500] [--episodes 30] [--seeds 0,1]
       [--families unet+ddpm,unet+flow,unet+flow-x,transformer+flow,transformer+flow-x-dp] [--store S] [--speed-only] [--out DIR [--only-done]] [--also-steps 1,2] [--json F]
"""
import argparse, json, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sim import recipe   # noqa: E402  (bench/sim.py: issue 25 / 36's training recipe)

# the recipe predicts the clean sample (DDPM); "flow" is pi0's velocity target, "flow-x" flow predicting the clean chunk
FAMILY = {"unet+ddpm": [], "unet+flow": ["policy.objective=flow", "policy.num_inference_steps=10",
                                        "policy.prediction_type=epsilon"],
          "unet+flow-x": ["policy.objective=flow", "policy.num_inference_steps=10", "policy.prediction_type=sample"],
          "transformer+flow": ["policy.objective=flow", "policy.num_inference_steps=10", "policy.denoiser=transformer",
                               "policy.prediction_type=epsilon",
                               "policy.transformer.n_layer=8", "policy.transformer.n_head=4",
                               "policy.transformer.n_emb=256", "policy.transformer.p_drop_attn=0.3",
                               "optimizer.weight_decay=1e-3", "optimizer.betas=[0.9,0.95]"]}
# (AdamW betas as diffusion_policy's transformer config; rows in RESULTS.md before 2026-11-27 ran RoboTwin's 0.95, 0.999)
FAMILY["transformer+flow-x"] = [o.replace("=epsilon", "=sample") for o in FAMILY["transformer+flow"]]
# the same, on diffusion_policy's own transformer schedule (its low-dim config: lr 1e-4, 1,000 warm-up steps)
FAMILY["transformer+flow-x-dp"] = FAMILY["transformer+flow-x"] + ["optimizer.lr=1e-4", "training.lr_warmup_steps=1000"]
# the same with full attention (no causal masks): does the action chunk need its steps to see the later ones?
FAMILY["transformer+flow-x-nc"] = FAMILY["transformer+flow-x"] + ["policy.transformer.causal_attn=false"]
# the same without dropout (diffusion_policy's 0.3 is for hundreds of epochs; this budget is 12): does it cost precision?
FAMILY["transformer+flow-x-d0"] = [o.replace("p_drop_attn=0.3", "p_drop_attn=0.0") for o in FAMILY["transformer+flow-x"]]
# and its observations through adaptive LayerNorm in every layer as well as cross-attention (DiT's adaLN-Zero)
FAMILY["transformer+flow-x-adaln"] = FAMILY["transformer+flow-x-d0"] + ["policy.transformer.cond=adaln"]


def chunk_ms(run, reps: int = 20, steps=None) -> float:
    """Median milliseconds to sample one action chunk (batch 1) with the run's EMA policy on this machine's CPU, in
    the run's number of sampling steps (or `steps`)."""
    import torch
    from dptoolkit.evaluate import load_policy
    pol, cfg = load_policy(run)
    obs = {k: (torch.randint(0, 255, (1, pol.n_obs_steps, *pol.obs_encoder.image_shapes[k]), dtype=torch.uint8)
               if k in pol.image_keys else torch.randn(1, pol.n_obs_steps, pol.obs_encoder.low_dim[k]))
           for k in pol.low_dim_keys + pol.image_keys}
    g = torch.Generator().manual_seed(0)
    kw = {"num_inference_steps": steps} if steps else {}
    pol.predict_action(obs, generator=g, **kw)   # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        pol.predict_action(obs, generator=g, **kw)
        ts.append(time.perf_counter() - t)
    return 1000 * sorted(ts)[len(ts) // 2]


def val_mae(run, steps=None) -> float:
    """Mean absolute error (data units) of the actions the run's EMA policy samples on its held-out windows (`dpt
    eval`), in the run's number of sampling steps (or `steps`). It separates families whose losses agree, but on issue
    47's pixel task it did not rank them by closed-loop success (bench/RESULTS.md): roll out before choosing."""
    from dptoolkit.evaluate import evaluate
    return round(float(evaluate(run, steps=steps, device="cpu", progress=False).metrics.loc["policy", "mae"]), 5)


def rolled(a, run_dir, steps, rollout) -> dict:
    """Success of `run_dir` on the --episodes held-out seeds (1000 …), sampling in `steps` (None: the run's own);
    kept beside the run (each seed's outcome and highest reward stage: 1 the right gripper touches the cube, 2 lifts it,
    3 both grippers touch it, 4 the left holds it off the table), so a rerun into --out reuses it."""
    kept = Path(run_dir) / (f"rollout-seed1000-{a.episodes}" + (f"-steps{steps}" if steps else "") + ".json")
    if kept.exists(): got = json.loads(kept.read_text())
    else:
        r = rollout(run_dir, episodes=a.episodes, workers=a.workers, seed=1000, progress=False, inference_steps=steps)
        got = dict(success=int(r.episodes.success.sum()), episodes=len(r.episodes),
                   outcomes={int(k): bool(v) for k, v in zip(r.episodes.seed, r.episodes.success)},
                   max_reward={int(k): int(v) for k, v in zip(r.episodes.seed, r.episodes.max_reward)})
        kept.write_text(json.dumps(got))
    return {k: v for k, v in got.items() if k not in ("outcomes", "max_reward")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demos", type=int, default=50); ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--episodes", type=int, default=30); ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--families", default=",".join(FAMILY)); ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64); ap.add_argument("--camera", action="store_true")
    ap.add_argument("--aux", action="store_true"); ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--store", type=Path); ap.add_argument("--out", type=Path); ap.add_argument("--json", type=Path)
    ap.add_argument("--speed-only", action="store_true", help="train --steps (default 30) and time; no rollouts")
    ap.add_argument("--only-done", action="store_true", help="table the runs already in --out; train none")
    ap.add_argument("--also-steps", default="", help="e.g. 1,2: each flow run rolled out and timed again with that "
                    "many Euler steps (rows 'FAMILY/N'; the trained model is the same)")
    a = ap.parse_args()
    if a.only_done and a.out is None: ap.error("--only-done tables the runs in --out: name the folder (--out DIR)")
    import pandas as pd
    from dptoolkit.config import for_store
    from dptoolkit.aloha import make_demos
    from dptoolkit.sim import rollout, wilson
    from dptoolkit.train import train
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-policies-"))
    store = a.store or ((out / "demos.zarr") if (out / "demos.zarr").exists() else None)   # a study's own demos
    if store is None and a.only_done:
        sys.exit(f"policies.py: --only-done: name the store the runs in {out} trained on (--store)")
    if store is None:
        t = time.perf_counter()
        demos = make_demos("transfer_cube", n=a.demos, out=out / "demos.zarr", camera=a.camera, size=(72, 96),
                           workers=a.workers, overwrite=True, noise=a.noise)
        store = demos.info.path
        print(demos, f"({time.perf_counter() - t:.0f} s)", flush=True)
    keys = ("[head_camera,state,env_state]" if a.aux else "[head_camera,state]") if a.camera else "[env_state,state]"
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = []
    for fam in a.families.split(","):
        for seed in seeds:
            cfg = for_store(store, name="test", overrides=[
                f"task.dataset.obs_keys={keys}", f"training.max_steps={a.steps}", f"dataloader.batch_size={a.batch}",
                f"training.checkpoint_every={a.steps}", f"training.log_every={max(1, a.steps // 20)}",
                "task.dataset.val_ratio=0.04", f"training.seed={seed}", *recipe(a.camera, aux=a.aux), *FAMILY[fam]])
            t, rd = time.perf_counter(), out / f"{fam}-seed{seed}"
            done = json.loads((rd / "result.json").read_text()) if (rd / "result.json").exists() else {}
            if done.get("steps") == a.steps:   # trained before into --out (a rerun after an interruption): reuse
                res, wall = type("R", (), dict(run_dir=rd, metrics=done))(), done["wall_s"]
            elif a.only_done: continue
            else: res, wall = train(cfg, nprocs=1, run_dir=rd, progress=False), None
            wall = wall if wall is not None else time.perf_counter() - t
            row = dict(family=fam, seed=seed, train_s=round(wall, 1),
                       samples_per_s=round(res.metrics.get("samples_per_s", float("nan")), 1),
                       final_loss=res.metrics.get("final_loss"), val_loss_ema=res.metrics.get("val_loss_ema"),
                       val_mae=val_mae(res.run_dir), chunk_ms=round(chunk_ms(res.run_dir), 2))
            if fam == "unet+ddpm":   # DDPM over all its training timesteps (RoboTwin deploys 100 of 100)
                n = int(cfg.policy.num_train_timesteps)
                row.update(chunk_ms_all_steps=round(chunk_ms(res.run_dir, reps=5, steps=n), 1), all_steps=n)
            if not a.speed_only: row.update(rolled(a, res.run_dir, None, rollout))
            rows.append(row)
            print(row, flush=True)
            for n in ([int(x) for x in a.also_steps.split(",") if x] if "flow" in fam else []):
                more = dict(row, family=f"{fam}/{n}", chunk_ms=round(chunk_ms(res.run_dir, steps=n), 2),
                            val_mae=val_mae(res.run_dir, steps=n))
                if not a.speed_only: more.update(rolled(a, res.run_dir, n, rollout))
                rows.append(more)
                print(more, flush=True)
    if not rows: sys.exit(f"policies.py: no finished run of {a.families} × seeds {a.seeds} in {out}")
    df = pd.DataFrame(rows)
    agg = df.groupby("family", sort=False).agg(train_s=("train_s", "mean"), samples_per_s=("samples_per_s", "mean"),
                                                chunk_ms=("chunk_ms", "median"), val_mae=("val_mae", "mean"))
    base = agg.chunk_ms.get("unet+ddpm")
    agg["sampling_speedup"] = (base / agg.chunk_ms) if base else float("nan")
    if "chunk_ms_all_steps" in df:
        ball, n = df.chunk_ms_all_steps.dropna().median(), int(df.all_steps.dropna().iloc[0])
        agg[f"speedup_vs_ddpm{n}"] = ball / agg.chunk_ms
        print(f"U-Net + DDPM over all {n} of its training timesteps: {ball:.0f} ms per chunk")
    if not a.speed_only:
        g = df.groupby("family", sort=False)
        agg["success"] = g.success.sum() / g.episodes.sum()
        lo_hi = [wilson(int(k), int(n)) for k, n in zip(g.success.sum(), g.episodes.sum())]
        agg["success_low"], agg["success_high"] = [x[0] for x in lo_hi], [x[1] for x in lo_hi]
        agg["per_seed"] = g.apply(lambda d: " ".join(f"{s}/{n}" for s, n in zip(d.success, d.episodes)))
    print(f"\n{len(seeds)} training seed(s) {seeds}, {a.steps} steps, episodes {a.episodes} per run on seeds 1000…:")
    print(agg.round(3).to_string(), flush=True)
    if a.json: a.json.write_text(json.dumps(dict(runs=rows, families=agg.reset_index().to_dict("records")), indent=1,
                                            default=str))


if __name__ == "__main__":
    main()
