"""RL post-training on ALOHA transfer-cube (issue 66): a low-dim flow policy behaviour-cloned from --demos scripted
demonstrations (few: it should succeed 30–70 % of the time), then `finetune` on --nprocs ranks (RIPT's LOOP, flow-SDE),
judged on the same --episodes held-out seeds before and after, with the deterministic sampler `dpt rollout` deploys
and the stochastic one RL trains; pooled over --bc-seeds × --rl-seeds with 95 % Wilson intervals. The control spends
the RL episodes as scripted demonstrations instead (BC on --demos + that many). Rollout throughput at world 1 and 2
from one iteration each with the same settings, and the bit-exact resume of a fine-tuned run.
Episodes of the held-out judgement are stepped 25 at a time in one process (`rl.success_on`); `--check-deployed` also
runs `dpt rollout` on each fine-tuned run (worker processes, the deployed path itself).
Usage: python bench/rl.py [--demos 8] [--bc-steps 1000] [--bc-seeds 0,1] [--rl-seeds 0,1] [--iterations 20]
       [--states 4] [--group 8] [--noise-level 0.2] [--episodes 50] [--control] [--throughput] [--resume-check]
       [--out DIR] [--json F] [--override rl.KEY=VALUE]
"""
import argparse, json, tempfile, time
from pathlib import Path

BC = ["task.dataset.obs_keys=[state,env_state]", "policy.objective=flow", "policy.prediction_type=sample",
      "policy.down_dims=[64,128,256]", "policy.n_groups=8", "policy.diffusion_step_embed_dim=64",
      "policy.num_inference_steps=10", "dataloader.batch_size=64", "optimizer.lr=1e-3", "task.dataset.val_ratio=0",
      "training.lr_warmup_steps=50", "training.log_every=100"]


def judge(run, seeds, noise_level):
    "Held-out success of a run's policy: deterministic (as deployed) and with the flow-SDE RL samples from."
    from dptoolkit.evaluate import load_policy
    from dptoolkit.rl import Noise, success_on
    pol, _ = load_policy(run)
    det = success_on(pol, seeds)
    noisy = success_on(pol, seeds, noise=Noise("sde", noise_level, None, pol.num_inference_steps))
    out = dict(deterministic=[bool(x) for x in det], noisy=[bool(x) for x in noisy])
    if hasattr(pol, "steer_deploy"):   # a steered run (rl.noise=latent): also started from μ(obs) alone
        pol.steer_deploy = "mean"
        out["mean"] = [bool(x) for x in success_on(pol, seeds)]
    return out


def pooled(rows, key):
    from dptoolkit.stats import wilson
    xs = [x for r in rows for x in r[key]]
    lo, hi = wilson(sum(xs), len(xs))
    return f"{sum(xs)}/{len(xs)} = {sum(xs) / len(xs):.0%} [{lo:.0%}–{hi:.0%}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demos", type=int, default=8); ap.add_argument("--bc-steps", type=int, default=1000)
    ap.add_argument("--bc-seeds", default="0,1"); ap.add_argument("--rl-seeds", default="0,1")
    ap.add_argument("--iterations", type=int, default=20); ap.add_argument("--states", type=int, default=4)
    ap.add_argument("--group", type=int, default=8); ap.add_argument("--noise-level", type=float, default=0.2)
    ap.add_argument("--nprocs", type=int, default=2); ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--control", action="store_true", help="BC on --demos + the RL episodes as demonstrations")
    ap.add_argument("--throughput", action="store_true", help="one iteration at world 1 and 2: episodes/min")
    ap.add_argument("--resume-check", action="store_true", help="2 + 2 iterations against 4: bit-exact weights")
    ap.add_argument("--check-deployed", action="store_true", help="dpt rollout on each fine-tuned run too")
    ap.add_argument("--override", action="append", default=[], help="rl.KEY=VALUE for every fine-tuning run")
    ap.add_argument("--out", type=Path); ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    from dptoolkit.config import for_store
    from dptoolkit.rl import finetune, rl_log
    from dptoolkit.aloha import make_demos
    from dptoolkit.train import train
    out = a.out or Path(tempfile.mkdtemp(prefix="dpt-rl-"))
    out.mkdir(parents=True, exist_ok=True)
    seeds, res = list(range(1000, 1000 + a.episodes)), dict(args=vars(a) | {"out": str(out), "json": str(a.json)})
    log = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", flush=True)
    if not (out / "demos.zarr").exists():
        make_demos(n=a.demos, out=out / "demos.zarr", workers=2, progress=False, noise=0.02)
    rl_ov = [f"rl.states={a.states}", f"rl.group={a.group}", f"rl.noise_level={a.noise_level}", *a.override]
    res["runs"] = []
    for b in map(int, a.bc_seeds.split(",")):
        bc = out / f"bc{b}"
        if not (bc / "result.json").exists():
            t = time.perf_counter()
            train(for_store(out / "demos.zarr", name="test", overrides=BC + [
                f"training.max_steps={a.bc_steps}", f"training.checkpoint_every={a.bc_steps}", f"training.seed={b}"]),
                nprocs=1, run_dir=bc, progress=False)
            log(f"BC seed {b}: {time.perf_counter() - t:.0f} s")
        before = judge(bc, seeds, a.noise_level)
        log(f"BC seed {b} before: deterministic {sum(before['deterministic'])}/{a.episodes}, noisy "
            f"{sum(before['noisy'])}/{a.episodes}")
        for r in map(int, a.rl_seeds.split(",")):
            rd = out / f"bc{b}-rl{r}"
            t = time.perf_counter()
            m = finetune(bc, out=rd, nprocs=a.nprocs, progress=False,
                         overrides=rl_ov + [f"rl.iterations={a.iterations}", f"rl.seed={r}"]).metrics
            wall = time.perf_counter() - t
            after = judge(rd, seeds, a.noise_level)
            curve = rl_log(rd)[["step", "episodes", "wall_s", "success", "groups_kept", "groups", "clip_frac",
                                "approx_kl", "rollout_s", "update_s"]].to_dict("records")
            row = dict(bc_seed=b, rl_seed=r, before=before, after=after, episodes=m["episodes"], wall_s=wall,
                       curve=curve)
            if a.check_deployed:
                from dptoolkit.sim import rollout
                dep = rollout(str(rd), episodes=a.episodes, seed=seeds[0], workers=2, progress=False)
                row["deployed"] = [bool(x) for x in dep.episodes["success"]]
            res["runs"].append(row)
            log(f"BC {b} RL {r}: {m['episodes']} episodes in {wall:.0f} s; after: deterministic "
                f"{sum(after['deterministic'])}/{a.episodes}, noisy {sum(after['noisy'])}/{a.episodes}")
            if a.json: a.json.write_text(json.dumps(res, indent=1))
    rows = res["runs"]
    for k in ("deterministic", "noisy", "mean"):
        if not all(k in r["after"] for r in rows): continue
        before = [{k: r["before"].get(k, r["before"]["deterministic"])} for r in rows]   # BC has no "mean"
        print(f"{k}: before {pooled(before, k)} → after {pooled([r['after'] for r in rows], k)}")
    if a.control and rows:
        extra = max(r["episodes"] for r in rows)
        cd = out / f"demos{a.demos + extra}.zarr"
        if not cd.exists():
            make_demos(n=a.demos + extra, out=cd, workers=2, progress=False, noise=0.02)
        res["control"] = []
        for b in map(int, a.bc_seeds.split(",")):
            bc = out / f"control-bc{b}"
            if not (bc / "result.json").exists():
                train(for_store(cd, name="test", overrides=BC + [
                    f"training.max_steps={a.bc_steps}", f"training.checkpoint_every={a.bc_steps}",
                    f"training.seed={b}"]), nprocs=1, run_dir=bc, progress=False)
            res["control"].append(judge(bc, seeds, a.noise_level))
            log(f"control BC seed {b} on {a.demos + extra} demos: {sum(res['control'][-1]['deterministic'])}/"
                f"{a.episodes}")
        print(f"control (BC on {a.demos}+{extra} demonstrations): {pooled(res['control'], 'deterministic')}")
    if a.throughput:
        bc, res["throughput"] = out / f"bc{a.bc_seeds.split(',')[0]}", {}
        for w in (1, 2):
            rd = out / f"tp-world{w}"
            finetune(bc, out=rd, nprocs=w, progress=False, overrides=rl_ov + [
                "rl.iterations=2", f"rl.states={a.states * 2 // w}", "rl.epochs=1"])
            d = rl_log(rd)
            res["throughput"][w] = float(60 * d["iteration_episodes"].sum() / d["rollout_s"].sum())
            log(f"world {w}: {res['throughput'][w]:.1f} episodes/min in rollouts")
        print(f"rollout throughput: world 2 / world 1 = {res['throughput'][2] / res['throughput'][1]:.2f}×")
    if a.resume_check:
        import torch
        from safetensors.torch import load_file
        bc, ov = out / f"bc{a.bc_seeds.split(',')[0]}", rl_ov + ["rl.checkpoint_every=1", "rl.states=2",
                                                                 "rl.keep_checkpoints=10"]
        finetune(bc, out=out / "rs-full", nprocs=a.nprocs, progress=False, overrides=ov + ["rl.iterations=4"])
        finetune(bc, out=out / "rs-half", nprocs=a.nprocs, progress=False, overrides=ov + ["rl.iterations=2"])
        finetune(bc, out=out / "rs-half", nprocs=a.nprocs, progress=False, overrides=["rl.iterations=4"])
        wa, wb = (load_file(out / r / "checkpoints" / "step_000004" / "model.safetensors") for r in ("rs-full", "rs-half"))
        w0 = load_file(out / "rs-full" / "checkpoints" / "step_000001" / "model.safetensors")
        res["resume_bit_exact"] = all(torch.equal(wa[k], wb[k]) for k in wa)
        res["resume_moved"] = any(not torch.equal(wa[k], w0[k]) for k in wa)
        kept = rl_log(out / "rs-full")["groups_kept"].tolist()
        print(f"resume 2 + 2 vs 4 iterations: bit-exact {res['resume_bit_exact']} (weights moved after iteration 1: "
              f"{res['resume_moved']}; groups kept per iteration {kept})")
    if a.json: a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
