"""Expert iteration on ALOHA transfer-cube with the library's `finetune(..., rl.method=iterate)` (issue 66): from each
BC run of bench/rl.py (--bc RUN,RUN: 8 demonstrations, 1000 steps), --rounds rounds of --episodes episodes played on
--nprocs ranks with the deterministic sampler the policy deploys (seeds 20000 on, far from the held-out 1000–1049),
successes added to the store, BC trained again from scratch on every rank (--bc-steps; default the source run's);
each round's policy judged on the same 50 held-out seeds (95 % Wilson, pooled over the BC runs).
--throughput: one round of --tp-episodes (64) episodes at world 1 and world 2 (episodes per minute of play).
--resume-check: 2 rounds straight against 1 round then continued to 2 (64 episodes, 100 BC steps): max |Δw|.
Usage: python bench/rl_iterate.py --bc RUN[,RUN] --out DIR [--rounds 2] [--episodes 640] [--bc-steps N] [--nprocs 2]
       [--throughput [--tp-episodes N]] [--resume-check] [--tag T] [--json F] [rl.KEY=VALUE ...]
"""
import argparse, json, time
from pathlib import Path

HELD = list(range(1000, 1050))


def judge(run) -> int:
    "Held-out successes of a run's (EMA) policy, deterministic sampler: what dpt rollout deploys."
    from dptoolkit.evaluate import load_policy
    from dptoolkit.rl import success_on
    pol, _ = load_policy(run)
    return sum(success_on(pol, HELD))


def ci(k, n) -> str:
    from dptoolkit.stats import wilson
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n:.0%} [{lo:.0%}–{hi:.0%}]"


def iterate(bc, out, nprocs, overrides):
    from dptoolkit.rl import finetune, rl_log
    t = time.perf_counter()
    finetune(bc, out=out, nprocs=nprocs, progress=False, overrides=["rl.method=iterate", *overrides])
    return rl_log(out), time.perf_counter() - t


def max_diff(a, b) -> float:
    from safetensors.torch import load_file
    wa, wb = load_file(a), load_file(b)
    return max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bc", required=True); ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2); ap.add_argument("--episodes", type=int, default=640)
    ap.add_argument("--bc-steps", type=int); ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--throughput", action="store_true"); ap.add_argument("--resume-check", action="store_true")
    ap.add_argument("--skip-main", action="store_true"); ap.add_argument("--json", type=Path)
    ap.add_argument("--tag", default="it", help="the runs' folder suffix: RUN-TAG")
    ap.add_argument("--tp-episodes", type=int, default=64, help="episodes of the throughput round")
    ap.add_argument("override", nargs="*", help="more rl.KEY=VALUE for the main runs, e.g. rl.tries=4")
    a = ap.parse_args()
    res = dict(args={k: str(v) for k, v in vars(a).items()}, runs=[])
    save = lambda: a.json and a.json.write_text(json.dumps(res, indent=1))
    common = ["rl.seed_start=20000"]
    for bc in ([] if a.skip_main else [Path(p) for p in a.bc.split(",")]):
        k0 = judge(bc)
        print(f"{bc.name}: BC {ci(k0, 50)}", flush=True)
        out = a.out / f"{bc.name}-{a.tag}"
        log, secs = iterate(bc, out, a.nprocs, common + [f"rl.iterations={a.rounds}", f"rl.episodes={a.episodes}"]
                            + ([f"rl.bc_steps={a.bc_steps}"] if a.bc_steps else []) + a.override)
        row = dict(bc=bc.name, before=k0, wall_s=secs, rounds=[])
        for rec in log.to_dict("records"):
            k = judge(out / "rounds" / str(rec["step"]) / "bc")
            row["rounds"].append(dict(round=rec["step"], played=rec["iteration_episodes"], succeeded=rec["successes"],
                                      kept=rec["groups_kept"], demos=rec["demos"], held_out=k,
                                      rollout_s=rec["rollout_s"], bc_s=rec["update_s"]))
            print(f"  round {rec['step']}: played {rec['iteration_episodes']} ({rec['successes']} succeeded, "
                  f"{rec['groups_kept']} kept, {rec['demos']} episodes in the store; play {rec['rollout_s']:.0f} s, BC {rec['update_s']:.0f} s) "
                  f"→ {ci(k, 50)}", flush=True)
        res["runs"].append(row)
        save()
    if res["runs"]:
        n = len(res["runs"]) * 50
        print("pooled: BC " + ci(sum(r["before"] for r in res["runs"]), n) + "".join(
            f"; round {i + 1}: " + ci(sum(r["rounds"][i]["held_out"] for r in res["runs"]), n)
            for i in range(a.rounds)), flush=True)
    first = Path(a.bc.split(",")[0])
    if a.throughput:
        tp = {}
        for w in (1, 2):
            log, _ = iterate(first, a.out / f"tp{a.tp_episodes}-world{w}", w, common + [
                "rl.iterations=1", f"rl.episodes={a.tp_episodes}", "rl.bc_steps=1"])
            tp[w] = 60 * a.tp_episodes / float(log["rollout_s"].iloc[0])
            print(f"throughput world {w}: {tp[w]:.0f} episodes/min of play", flush=True)
        res["throughput"] = dict(world1=tp[1], world2=tp[2], ratio=tp[2] / tp[1])
        print(f"world 2 / world 1: {tp[2] / tp[1]:.2f}×", flush=True)
        save()
    if a.resume_check:
        small = common + ["rl.episodes=64", "rl.bc_steps=100"]
        iterate(first, a.out / "rs-full", a.nprocs, small + ["rl.iterations=2"])
        iterate(first, a.out / "rs-half", a.nprocs, small + ["rl.iterations=1"])
        iterate(first, a.out / "rs-half", a.nprocs, ["rl.iterations=2"])
        f = [a.out / r / "checkpoints" / "step_000002" / "ema.safetensors" for r in ("rs-full", "rs-half")]
        stores = [json.loads((a.out / r / "rounds" / "2" / "played" / "rank0.json").read_text())["successes"]
                  for r in ("rs-full", "rs-half")]
        d = max_diff(*f)
        res["resume"] = dict(max_abs_diff=d, round2_rank0_successes=stores)
        print(f"resume: 1 + 1 rounds against 2 straight: max |Δw| = {d:g} (round 2 rank 0 successes {stores})",
              flush=True)
        save()


if __name__ == "__main__":
    main()
