"""RL post-training on a GPU (issue 66), in one call of a lent GPU machine: the CUDA path of `finetune` (a world of one,
NCCL), its exact resume there, FSDP at world 1 on CUDA (never run before) with its resume, the memory plan `dpt config`
prints on a GPU, and a sweep of RL recipes fine-tuned side by side on the one GPU from the same BC run (each its own
process: the policy on the GPU, its episodes' physics on the CPU), each judged on the same held-out seeds.

The BC run is trained here, on the GPU, with bench/rl.py's recipe (low-dim transfer-cube flow policy, U-Net
[64, 128, 256], 10 Euler steps, 1000 steps) from the carried `--demos` store (bench/rl.py's 8 DART demonstrations).
Each recipe runs until `--deadline` seconds after the sweep started, then gets SIGTERM (its iteration ends and is
checkpointed), and its latest checkpoint is judged: deterministic (as `dpt rollout` deploys it) and with the flow-SDE
at its own floor, on held-out seeds 1000 … 1000 + episodes − 1 (generator seed 0: the same episodes for every run).
Usage: python bench/gpu_rl.py --demos STORE [--out DIR] [--json F] [--states 8] [--group 8] [--deadline 330]
       [--bc-steps 1000] [--episodes 50] [--variants name,name] [--quick]
`--quick`: the same steps, tiny (a CPU smoke test of this script).
"""
import argparse, json, os, signal, subprocess, sys, time
from pathlib import Path

BC = ["task.dataset.obs_keys=[state,env_state]", "policy.objective=flow", "policy.prediction_type=sample",
      "policy.down_dims=[64,128,256]", "policy.n_groups=8", "policy.diffusion_step_embed_dim=64",
      "policy.num_inference_steps=10", "dataloader.batch_size=64", "optimizer.lr=1e-3", "task.dataset.val_ratio=0",
      "training.lr_warmup_steps=50", "training.log_every=100"]
# the recipes: the default (no gain on CPU, bench/RESULTS.md), DPPO's std floor, a larger step with the floor, flow-noise
VARIANTS = {
    "default": [],
    "floor05": ["rl.min_std=0.05"],
    "floor10": ["rl.min_std=0.1"],
    "floor10-lr1e-4": ["rl.min_std=0.1", "rl.lr=1e-4"],
    "floor10-lr3e-5-nokl": ["rl.min_std=0.1", "rl.lr=3e-5", "rl.target_kl=0"],
    "learned": ["rl.noise=learned", "rl.noise_level=0.1"],
    # the second sweep: each episode weighed once (a long failure no longer outweighs a short success), 3 RL seeds
    **{f"episode-s{r}": ["rl.weigh=episode", f"rl.seed={r}"] for r in range(3)},
    **{f"episode-lr3e-5-s{r}": ["rl.weigh=episode", "rl.lr=3e-5", f"rl.seed={r}"] for r in range(2)},
    "default-s1": ["rl.seed=1"],
}
T0 = time.perf_counter()


def log(m): print(f"[{time.perf_counter() - T0:6.1f} s] {m}", flush=True)


def judge_main(a):
    "Subprocess mode: one run's held-out success, deterministic and with the flow-SDE at --floor; JSON to --json."
    import torch
    from dptoolkit.evaluate import load_policy
    from dptoolkit.rl import Noise, success_on
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    pol, _ = load_policy(a.judge, device=dev)
    pol = pol.to(dev).eval()
    seeds = list(range(1000, 1000 + a.episodes))
    t = time.perf_counter()
    det = success_on(pol, seeds, max_steps=a.max_steps)
    noisy = success_on(pol, seeds, max_steps=a.max_steps,
                       noise=Noise("sde", a.level, None, pol.num_inference_steps, a.floor))
    Path(a.json).write_text(json.dumps(dict(deterministic=[bool(x) for x in det], noisy=[bool(x) for x in noisy],
                                            floor=a.floor, seconds=time.perf_counter() - t)))


def judges(runs, a, out):
    "Judge `runs` ({name: (run, floor)}) in parallel processes; {name: result or error}."
    procs = {}
    for name, (run, floor) in runs.items():
        f = out / f"judge-{name}.json"
        procs[name] = (subprocess.Popen([sys.executable, __file__, "--judge", str(run), "--floor", str(floor),
                                         "--episodes", str(a.episodes), "--max-steps", str(a.max_steps),
                                         "--json", str(f)], env=os.environ | {"OMP_NUM_THREADS": "2"},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), f)
    res = {}
    for name, (p, f) in procs.items():
        o, _ = p.communicate()
        res[name] = json.loads(f.read_text()) if p.returncode == 0 else dict(error=o[-1500:])
    return res


def cuda_checks(bc, demos, out, a, res):
    "finetune on CUDA: 2 iterations straight against 1 + 1 (bit-exact?); 2 ranks on one GPU; FSDP world 1; dpt config."
    import torch
    from safetensors.torch import load_file
    from dptoolkit.config import for_store
    from dptoolkit.rl import finetune, rl_log
    from dptoolkit.train import train
    ov = ["rl.states=2", "rl.group=4", f"rl.max_steps={a.max_steps}", "rl.checkpoint_every=1", "rl.keep_checkpoints=5"]
    t = time.perf_counter()
    finetune(bc, out=out / "rs-full", nprocs=1, progress=False, overrides=ov + ["rl.iterations=2"])
    finetune(bc, out=out / "rs-half", nprocs=1, progress=False, overrides=ov + ["rl.iterations=1"])
    finetune(bc, out=out / "rs-half", nprocs=1, progress=False, overrides=["rl.iterations=2"])
    w = [load_file(out / r / "checkpoints" / "step_000002" / "model.safetensors") for r in ("rs-full", "rs-half")]
    w1 = load_file(out / "rs-full" / "checkpoints" / "step_000001" / "model.safetensors")
    d = rl_log(out / "rs-full")
    res["rl_cuda"] = dict(bit_exact=all(torch.equal(w[0][k], w[1][k]) for k in w[0]),
                          max_abs_diff=max(float((w[0][k] - w[1][k]).abs().max()) for k in w[0]),
                          moved=any(not torch.equal(w[0][k], w1[k]) for k in w1), seconds=time.perf_counter() - t,
                          log=d[["step", "success", "approx_kl", "clip_frac", "rollout_s", "update_s"]].to_dict("records"))
    res["rl_cuda"]["device"] = [l.strip() for l in (out / "rs-full" / "config.yaml").read_text().splitlines()
                                if l.strip().startswith("device:")][:2]
    log(f"RL on CUDA: resume 1 + 1 vs 2 bit-exact {res['rl_cuda']['bit_exact']} (max |Δ| "
        f"{res['rl_cuda']['max_abs_diff']:.2e}), moved {res['rl_cuda']['moved']}, {res['rl_cuda']['device']}")
    try:
        finetune(bc, out=out / "two-ranks", nprocs=2, progress=False, overrides=ov + ["rl.iterations=1"])
        res["two_ranks_one_gpu"] = "ran"
    except Exception as e:
        res["two_ranks_one_gpu"] = f"{type(e).__name__}: {e}"
    log(f"2 ranks on one GPU: {res['two_ranks_one_gpu']}")
    # FSDP at world 1 on CUDA (bf16 autocast as configured), 2·n steps straight against n + n resumed
    n = 10 if not a.quick else 3
    fo = ["training.strategy=fsdp", "training.deterministic=true", "training.log_every=1",
          f"training.checkpoint_every={n}", "dataloader.batch_size=32"]
    runs = {}
    t = time.perf_counter()
    for name, steps in (("fsdp-full", [2 * n]), ("fsdp-half", [n, 2 * n]), ("ddp-full", [2 * n])):
        for i, s in enumerate(steps):
            extra = (["training.strategy=ddp"] if name.startswith("ddp") else []) + (["training.resume=true"] if i else [])
            train(for_store(demos, name="test", overrides=BC + fo + extra + [f"training.max_steps={s}"]), nprocs=1,
                  run_dir=out / name, progress=False)
        runs[name] = out / name
    step = f"step_{2 * n:06d}"
    wf, wh, wd = (load_file(runs[r] / "checkpoints" / step / "model.safetensors") for r in ("fsdp-full", "fsdp-half",
                                                                                          "ddp-full"))
    from dptoolkit.report import read_log
    lf, ld = (read_log(runs[r])["loss"].dropna().tolist() for r in ("fsdp-full", "ddp-full"))
    res["fsdp_cuda"] = dict(resume_bit_exact=all(torch.equal(wf[k], wh[k]) for k in wf),
                            resume_max_abs_diff=max(float((wf[k] - wh[k]).abs().max()) for k in wf),
                            vs_ddp_max_abs_diff=max(float((wf[k] - wd[k]).abs().max()) for k in wf),
                            losses_fsdp=lf, losses_ddp=ld, seconds=time.perf_counter() - t,
                            run=[l.strip() for l in (runs["fsdp-full"] / "config.yaml").read_text().splitlines()
                                 if l.strip().startswith(("strategy:", "precision:", "backend:"))])
    log(f"FSDP on CUDA: resume bit-exact {res['fsdp_cuda']['resume_bit_exact']}, vs DDP max |Δw| "
        f"{res['fsdp_cuda']['vs_ddp_max_abs_diff']:.2e}; {res['fsdp_cuda']['run']}")
    p = subprocess.run([sys.executable, "-m", "dptoolkit.cli", "config", str(demos), "--nprocs", "2",
                        "training.strategy=fsdp"], capture_output=True, text=True)
    res["dpt_config"] = [l for l in (p.stdout + p.stderr).splitlines() if "memory" in l.lower() or "warn" in l.lower()
                         or "gpu" in l.lower()][:8] + [f"rc {p.returncode}"]
    log(f"dpt config --nprocs 2 fsdp on this GPU machine: {res['dpt_config']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demos", type=Path); ap.add_argument("--out", type=Path); ap.add_argument("--json", type=Path)
    ap.add_argument("--states", type=int, default=8); ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--deadline", type=float, default=330); ap.add_argument("--bc-steps", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=50); ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--variants", default=",".join(VARIANTS)); ap.add_argument("--quick", action="store_true")
    ap.add_argument("--judge"); ap.add_argument("--floor", type=float, default=0.0)
    ap.add_argument("--level", type=float, default=0.2)
    ap.add_argument("--bc", type=Path, help="a BC run to start from (default: train one here)")
    ap.add_argument("--skip-checks", action="store_true", help="the sweep only (no CUDA checks)")
    a = ap.parse_args()
    if a.judge: return judge_main(a)
    if a.quick: a.states, a.group, a.bc_steps, a.episodes, a.max_steps = 2, 2, 30, 4, 60
    import torch
    from dptoolkit.config import for_store
    from dptoolkit.rl import rl_log
    from dptoolkit.train import train
    out = a.out or Path("/tmp/gpu_rl")
    out.mkdir(parents=True, exist_ok=True)
    res = dict(args={k: str(v) for k, v in vars(a).items()}, torch=torch.__version__, cores=os.cpu_count(),
               gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    save = lambda: a.json and a.json.write_text(json.dumps(res, indent=1, default=str))
    log(f"torch {res['torch']}, {res['gpu']}, {res['cores']} cores")
    bc = a.bc or out / "bc"
    t = time.perf_counter()
    if not a.bc:
        train(for_store(a.demos, name="test", overrides=BC + [f"training.max_steps={a.bc_steps}",
                                                              f"training.checkpoint_every={a.bc_steps}"]),
              nprocs=1, run_dir=bc, progress=False)
        res["bc_seconds"] = time.perf_counter() - t
        log(f"BC trained in {res['bc_seconds']:.0f} s")
    if not a.skip_checks:
        from dptoolkit.rl import finetune
        t = time.perf_counter()   # fail fast: one tiny iteration on this device before the sweep spends the minutes
        finetune(bc, out=out / "smoke", nprocs=1, progress=False, overrides=[
            "rl.states=2", "rl.group=2", "rl.iterations=1", "rl.max_steps=40", "rl.noise=learned"])
        log(f"smoke: a tiny fine-tune ran in {time.perf_counter() - t:.0f} s")
    names = [n for n in a.variants.split(",") if n]
    procs = {}
    for name in names:
        ov = VARIANTS[name] + [f"rl.states={a.states}", f"rl.group={a.group}", f"rl.max_steps={a.max_steps}",
                               "rl.iterations=100", "rl.checkpoint_every=1", "rl.keep_checkpoints=2"]
        lf = open(out / f"{name}.log", "w")
        procs[name] = subprocess.Popen([sys.executable, "-m", "dptoolkit.cli", "finetune", str(bc), "--out",
                                        str(out / name), "--nprocs", "1", *ov], stdout=lf, stderr=subprocess.STDOUT,
                                       env=os.environ | {"OMP_NUM_THREADS": "1"}, start_new_session=True)
    sweep0 = time.perf_counter()
    time.sleep(20)
    for name in names[:1]: log(f"{name}: " + " | ".join((out / f"{name}.log").read_text().splitlines()[:3])[:600])
    floors = sorted({0.0, *(float(o.split("=")[1]) for n in names for o in VARIANTS[n] if o.startswith("rl.min_std"))})
    res["before"] = judges({f"bc-floor{f}": (bc, f) for f in floors}, a, out)
    log("before: " + ", ".join(f"{k}: det {sum(v['deterministic'])} noisy {sum(v['noisy'])}" if "error" not in v
                               else f"{k}: {v['error'][-300:]}" for k, v in res["before"].items()))
    save()
    try: a.skip_checks or cuda_checks(bc, a.demos, out, a, res)
    except Exception as e:
        import traceback
        res["cuda_checks_error"] = traceback.format_exc()[-3000:]
        log(res["cuda_checks_error"])
    save()
    while time.perf_counter() - sweep0 < a.deadline and any(p.poll() is None for p in procs.values()):
        time.sleep(5)
    for p in procs.values():
        if p.poll() is None: os.killpg(p.pid, signal.SIGTERM)
    for name, p in procs.items():
        try: p.wait(timeout=90)
        except subprocess.TimeoutExpired: os.killpg(p.pid, signal.SIGKILL)
    res["sweep_seconds"] = time.perf_counter() - sweep0
    runs, res["variants"] = {}, {}
    for name in names:
        rd = out / name
        try:
            d = rl_log(rd)
            res["variants"][name] = dict(overrides=VARIANTS[name], curve=d[[
                "step", "episodes", "wall_s", "success", "groups_kept", "groups", "clip_frac", "approx_kl",
                "rollout_s", "update_s"]].to_dict("records"))
            floor = next((float(o.split("=")[1]) for o in VARIANTS[name] if o.startswith("rl.min_std")), 0.0)
            runs[name] = (rd, floor)
        except Exception as e:
            res["variants"][name] = dict(error=f"{type(e).__name__}: {e}",
                                         log=(out / f"{name}.log").read_text()[-2000:])
    log("sweep stopped; judging " + ", ".join(runs))
    for name, j in judges(runs, a, out).items(): res["variants"][name]["after"] = j
    save()
    b0 = res["before"].get("bc-floor0.0", {})
    print(f"\nBC before: deterministic {sum(b0.get('deterministic', []))}/{a.episodes}")
    for name, v in res["variants"].items():
        if "error" in v: print(f"{name:22s} {v['error']}"); continue
        c, j = v["curve"], v.get("after", {})
        print(f"{name:22s} {len(c)} it, {c[-1]['episodes'] if c else 0} episodes; iteration success "
              f"{[round(r['success'] * 100) for r in c]} %; after: det {sum(j.get('deterministic', []))}/"
              f"{a.episodes} noisy {sum(j.get('noisy', []))}/{a.episodes} {j.get('error', '')[-300:]}")
    log("done")


if __name__ == "__main__":
    main()
