"""Checkpoints cross between dptoolkit and RoboTwin's own, unmodified code, both ways (issue 35).

    python bench/robotwin.py --robotwin ROBOTWIN --python SIDE_PYTHON [--dim 14|16] [--cameras head,left,right] [--work DIR]

ROBOTWIN is a checkout of RoboTwin 2.0 (`git clone -b stable_2.0 https://github.com/RoboTwin-Platform/RoboTwin`);
SIDE_PYTHON the interpreter of a virtualenv *without* dptoolkit holding their dependencies, e.g.

    python3 -m venv rtvenv && rtvenv/bin/pip install torch==2.14.1 torchvision==0.29.1 hydra-core==1.3.2 \\
        omegaconf==2.3.0 diffusers==0.30.3 'huggingface_hub<0.26' zarr==2.18.3 'numcodecs<0.16' dill==0.4.1 h5py \\
        opencv-python-headless numba einops tqdm pyyaml pandas

Their `policy/DP`, `task_config` and the episode writer `envs/utils/pkl2hdf5.py` are copied, unchanged, into
WORK/RoboTwin; nothing of theirs is in this repository. Two things the harness changes at run time, both
about the missing GPU only: their `DP.get_policy` is called with device "cpu" (it hard-codes "cuda:0"), and without
CUDA `Tensor.pin_memory` (which their `RobotImageDataset` calls on its batch buffers) returns the tensor unpinned --
this torch build raises "Found no NVIDIA driver" otherwise. Page-locking changes no number.

The steps, each with their real code on one side:
 1. raw episodes (`data/<task>/<config>/data/episode<i>.hdf5`: joint_action/*, four cameras' JPEG frames) written by
    their `create_hdf5_from_dict` (`bench/robotwin_raw.py`);
 2. their `process_data.py` → a store;  3. `dpt train` on it;  4. `dpt export` to the path their `get_model` reads;
 5. their `get_model` + `deploy_policy.eval` on replayed episodes vs our policy on the same windows and seeds;
 6. their `train.py` (CPU) writes a checkpoint;  7. `dpt import` with dill blocked;  8. `dpt eval`;
 9. their deploy on their checkpoint vs our imported run;  10. `dpt train --resume` continues at their step;
 11. their `train.py` with `training.resume=True` from our export at `<their run dir>/checkpoints/latest.ckpt`.
Prints a table and writes WORK/robotwin-<dim>.json.

With several cameras (`--cameras head,left,right`) step 2 is `dpt convert` on their raw episodes (their
process_data.py and their RobotImageDataset keep head_camera only, so their train.py cannot train on other cameras):
steps 3-5 run with every named camera -- their deploy_policy.encode_obs hands head_cam, left_cam and right_cam to the
policy their get_policy builds from our export's cfg -- and steps 6-11 are left out (recorded as such).
"""
import argparse, json, os, shutil, subprocess, sys, textwrap, time
from pathlib import Path

import numpy as np

TASK, SETTING, SEED = "beat_block_hammer", "demo_clean", 0

RUN_THEIRS = r'''
import runpy, sys, torch
if not torch.cuda.is_available():   # page-locked memory needs a CUDA driver; without one, leave tensors as they are
    torch.Tensor.pin_memory = lambda self, *a, **k: self
sys.argv = sys.argv[1:]
sys.path[0] = __import__("os").path.dirname(__import__("os").path.abspath(sys.argv[0]))   # as `python train.py` has it
runpy.run_path(sys.argv[0], run_name="__main__")
'''

DEPLOY = r'''
import importlib, json, sys, numpy as np, torch, h5py, cv2
root, out, ckpt_setting, num, seed, ldim, rdim, calls, episode = sys.argv[1:10]
sys.path.insert(0, root)
deploy = importlib.import_module("policy.DP.deploy_policy")
dp_model = importlib.import_module("policy.DP.dp_model")
_get = dp_model.DP.get_policy
dp_model.DP.get_policy = lambda self, ckpt, output_dir, device: _get(self, ckpt, output_dir, "cpu")   # no GPU here
usr = {"task_name": sys.argv[10], "ckpt_setting": ckpt_setting, "expert_data_num": int(num), "seed": int(seed),
       "checkpoint_num": 600, "left_arm_dim": int(ldim), "right_arm_dim": int(rdim)}
model = deploy.get_model(usr)
with h5py.File(f"{root}/data/{sys.argv[10]}/{sys.argv[11]}/data/episode{episode}.hdf5") as f:
    frames = {c: [cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR) for b in f[f"observation/{c}/rgb"][()]]
              for c in ("head_camera", "left_camera", "right_camera")}
    vector = f["joint_action/vector"][()]
class Replay:   # the parts of their TASK_ENV that deploy_policy.eval calls, replaying a recorded episode
    def __init__(self): self.i, self.actions = 0, []
    def get_instruction(self): return "replay"
    def get_obs(self):
        i = min(self.i, len(vector) - 1)
        return {"observation": {c: {"rgb": frames[c][i]} for c in frames}, "joint_action": {"vector": vector[i]}}
    def take_action(self, a): self.actions.append(np.asarray(a)); self.i += 1
rec, acts, seeds = [], [], []
runner = model.runner
stack = runner.get_n_steps_obs
def recording():
    r = stack(); rec.append({k: np.array(v) for k, v in r.items()}); return r
runner.get_n_steps_obs = recording
act = model.get_action
def seeded(obs=None):
    seeds.append(1000 + len(seeds)); torch.manual_seed(seeds[-1])
    a = act(obs); acts.append(np.array(a)); return a
model.get_action = seeded
deploy.reset_model(model)
env = Replay()
for _ in range(int(calls)): deploy.eval(env, model, env.get_obs())
np.savez(out, seeds=np.array(seeds), actions=np.stack(acts), executed=np.stack(env.actions),
         **{f"{k}_{j}": (np.rint(v * 255).astype(np.uint8) if k.endswith("_cam") else v)
            for j, r in enumerate(rec) for k, v in r.items()})
print(json.dumps({"calls": len(acts), "executed": len(env.actions), "policy": type(model.policy).__name__,
                  "params": sum(p.numel() for p in model.policy.parameters())}))
'''


def sh(cmd, cwd=None, env=None, check=True, log=None):
    t = time.time()
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    if log is not None:
        Path(log).write_text(f"$ {' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}")
    if check and r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    return r, time.time() - t


def dpt(*args, block_dill=False, **kw):
    pre = "import sys; sys.modules['dill'] = None; " if block_dill else "import sys; "
    return sh([sys.executable, "-c", pre + "from dptoolkit.cli import main; sys.exit(main(sys.argv[1:]))", *args], **kw)


def compare(run, npz, cameras):
    "Our policy (the run's EMA weights) on the windows their deploy saw, with the same seeds: max |difference|."
    import torch
    from dptoolkit.evaluate import load_policy
    policy, cfg = load_policy(run)
    d = np.load(npz)
    worst, n = 0.0, len(d["seeds"])
    for j in range(n):
        obs = {"state": torch.from_numpy(d[f"agent_pos_{j}"]).float()[None]}
        for c in cameras: obs[f"{c}_camera"] = torch.from_numpy(d[f"{c}_cam_{j}"])[None]
        torch.manual_seed(int(d["seeds"][j]))
        with torch.no_grad(): ours = policy.predict_action(obs)["action"][0].numpy()
        worst = max(worst, float(np.abs(ours - d["actions"][j]).max()))
    return worst, n, float(np.abs(d["actions"]).max())


def their_train(py, DP, run_dir, store, dim, extra, log):
    args = [py, Path(run_dir).parent / "side/run_theirs.py", "train.py", f"--config-name=robot_dp_{dim}.yaml", f"task.name={TASK}",
            f"task.dataset.zarr_path={store}", "training.debug=False", f"training.seed={SEED}",
            "training.device=cpu", f"exp_name={TASK}-robot_dp-train", "logging.mode=offline", f"setting={SETTING}",
            f"expert_data_num={extra['num']}", "head_camera_type=D435", "dataloader.batch_size=2",
            "val_dataloader.batch_size=2", "training.max_train_steps=3", "training.max_val_steps=1",
            "training.checkpoint_every=1", f"training.num_epochs={extra['epochs']}",
            f"training.resume={extra.get('resume', False)}", f"hydra.run.dir={run_dir}"]
    return sh(args, cwd=DP, env=dict(os.environ, HYDRA_FULL_ERROR="1"), log=log)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--robotwin", required=True, help="RoboTwin checkout (branch stable_2.0)")
    ap.add_argument("--python", required=True, help="the side virtualenv's python (their dependencies, no dptoolkit)")
    ap.add_argument("--dim", type=int, default=14, choices=[14, 16])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30, help="steps per raw episode")
    ap.add_argument("--cameras", default="head", help="comma-separated: head (their whole pipeline) or several "
                    "of head,left,right (their deploy only)")
    ap.add_argument("--work", default="bench/out/robotwin")
    a = ap.parse_args(argv)
    cams = a.cameras.split(",")
    tag = f"{a.dim}" + ("" if cams == ["head"] else "-" + "-".join(cams))
    work = Path(a.work).absolute() / f"dim{tag}"
    shutil.rmtree(work, ignore_errors=True)
    RT = work / "RoboTwin"
    for part in ("policy/DP", "task_config", "envs/utils/pkl2hdf5.py", "envs/utils/images_to_video.py",
                 "policy/__init__.py"):
        src, dst = Path(a.robotwin) / part, RT / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    DP, py, fig, t0 = RT / "policy/DP", a.python, {}, time.time()
    ldim = rdim = (a.dim - 2) // 2
    setting = SETTING
    (work / "side").mkdir()
    (work / "side/deploy.py").write_text(DEPLOY)
    (work / "side/run_theirs.py").write_text(RUN_THEIRS)

    # 1-2: raw episodes by their writer, a store by their process_data.py
    sh([py, Path(__file__).with_name("robotwin_raw.py"), RT, TASK, setting, a.episodes, a.steps, "--arms",
        f"{ldim},{rdim}"])
    if cams == ["head"]:
        _, fig["process_data_s"] = sh([py, "process_data.py", TASK, setting, a.episodes], cwd=DP,
                                      log=work / "process.log")
        store = DP / f"data/{TASK}-{setting}-{a.episodes}.zarr"
        print(f"their process_data.py: {store.name} in {fig['process_data_s']:.1f} s")
    else:
        store = work / f"{TASK}-{'-'.join(cams)}.zarr"
        _, fig["dpt_convert_s"] = dpt("convert", RT / "data" / TASK, "-o", store, "--cameras",
                                      ",".join(f"{c}_camera" for c in cams), "--no-progress", log=work / "convert.log")
        print(f"dpt convert (their raw episodes, cameras {cams}): {store.name} in {fig['dpt_convert_s']:.1f} s")
    keys = [f"{c}_camera" for c in cams] + ["state"]

    # 3-4: dpt train on their store, dpt export to where their get_model looks
    ours = work / "ours"
    _, fig["dpt_train_s"] = dpt("train", "--data", store, "--out", ours, "--nprocs", "1", "--no-progress",
                                "training.max_steps=4", "dataloader.batch_size=2", "training.lr_warmup_steps=2",
                                "training.device=cpu", "training.checkpoint_every=0", "training.log_every=1",
                                f"task.dataset.obs_keys=[{','.join(keys)}]", log=work / "dpt-train.log")
    ckdir = DP / f"checkpoints/{TASK}-ours-{a.episodes}-{SEED}"
    r, _ = dpt("export", ours, "-o", ckdir / "600.ckpt", "--task-name", TASK)
    print(r.stdout.strip())

    # 5: their deploy on our export vs our policy
    r, fig["their_deploy_s"] = sh([py, work / "side/deploy.py", RT, work / "deploy-ours.npz", "ours", a.episodes, SEED,
                                   ldim, rdim, 3, a.episodes - 1, TASK, setting], cwd=RT, log=work / "deploy-ours.log")
    print("their deploy on our export:", r.stdout.strip().splitlines()[-1])
    fig["deploy_ours_max_diff"], fig["deploy_calls"], scale = compare(ours, work / "deploy-ours.npz", cams)
    print(f"  their actions vs ours, same windows and seeds: max |diff| {fig['deploy_ours_max_diff']:.3g} "
          f"over {fig['deploy_calls']} chunks (actions up to {scale:.2f})")
    if cams != ["head"]:
        fig["their_train"] = "not run: their RobotImageDataset reads head_camera only"
        fig["total_s"] = round(time.time() - t0, 1)
        (work.parent / f"robotwin-{tag}.json").write_text(json.dumps(fig, indent=1))
        print(json.dumps(fig, indent=1))
        return

    # 6-9: their train.py writes a checkpoint; dpt import (no dill), dpt eval, their deploy vs our imported run
    theirs = work / "their_run"
    _, fig["their_train_s"] = their_train(py, DP, theirs, store.relative_to(DP), a.dim,
                                          {"num": a.episodes, "epochs": 2}, work / "their-train.log")
    ck = sorted((DP / "checkpoints" / f"{store.stem}-{SEED}").glob("*.ckpt"))[-1]
    print(f"their train.py: {ck.relative_to(RT)} in {fig['their_train_s']:.1f} s")
    imp = work / "imported"
    r, _ = dpt("import", ck, "-o", imp, "--trust", "--data", store, block_dill=True)
    print(r.stdout.strip().splitlines()[0])
    st = __import__("torch").load(imp / "checkpoints" / (imp / "checkpoints/latest").read_text().strip() / "state.pt",
                                  weights_only=True, mmap=True)
    fig["their_step"], fig["their_epoch"] = st["step"], st["epoch"]
    fig["imported_optimizer_tensors"] = len(st["optimizer"]["state"])
    r, _ = dpt("eval", imp, "--data", store, "--split", "all", "--windows", "8", "--json", "--no-progress")
    ev = json.loads(r.stdout)
    fig["eval_policy_mse"], fig["eval_hold_mse"] = ev["policy"]["mse"], ev["hold"]["mse"]
    print(f"dpt eval on the imported run: policy mse {ev['policy']['mse']:.4f}, hold {ev['hold']['mse']:.4f}")
    shutil.copy(ck, (DP / f"checkpoints/{TASK}-theirs-{a.episodes}-{SEED}").mkdir(parents=True) or
                DP / f"checkpoints/{TASK}-theirs-{a.episodes}-{SEED}/600.ckpt")
    sh([py, work / "side/deploy.py", RT, work / "deploy-theirs.npz", "theirs", a.episodes, SEED, ldim, rdim, 2,
        a.episodes - 1, TASK, setting], cwd=RT, log=work / "deploy-theirs.log")
    fig["deploy_theirs_max_diff"], _, _ = compare(imp, work / "deploy-theirs.npz", ["head"])
    print(f"  their deploy on their checkpoint vs our imported run: max |diff| {fig['deploy_theirs_max_diff']:.3g}")

    # 10: dpt train --resume continues at their step
    dpt("train", "--config", imp / "config.yaml", "--data", store, "--out", imp, "--resume", "--nprocs", "1",
        "--no-progress", f"training.max_steps={st['step'] + 2}", "training.device=cpu", "training.log_every=1",
        "training.checkpoint_every=0", "dataloader.batch_size=2", log=work / "dpt-resume.log")
    steps = [json.loads(l)["step"] for l in open(imp / "logs.jsonl") if '"loss"' in l]
    fig["dpt_resume_steps"] = steps
    print(f"dpt train --resume on the imported run logged steps {steps} (their global_step {st['step']})")

    # 11: their train.py resumes from our export
    res = work / "their_resume"
    (res / "checkpoints").mkdir(parents=True)
    shutil.copy(ckdir / "600.ckpt", res / "checkpoints/latest.ckpt")
    r, _ = their_train(py, DP, res, store.relative_to(DP), a.dim, {"num": a.episodes, "epochs": 1, "resume": True},
                       work / "their-resume.log")
    logs = [json.loads(l) for l in open(res / "logs.json.txt")]
    fig["their_resume_first_step"], fig["their_resume_epoch"] = logs[0]["global_step"], logs[0]["epoch"]
    fig["their_resume_loss_finite"] = bool(all(np.isfinite(l["train_loss"]) for l in logs))
    fig["their_resume_said"] = next((l for l in (r.stdout + r.stderr).splitlines() if "Resuming" in l), "")
    print(f"their train.py resumed from our export: '{fig['their_resume_said'].strip()}', first logged global_step "
          f"{logs[0]['global_step']}, epoch {logs[0]['epoch']}, losses finite: {fig['their_resume_loss_finite']}")
    fig["total_s"] = round(time.time() - t0, 1)
    (work.parent / f"robotwin-{tag}.json").write_text(json.dumps(fig, indent=1))
    print(json.dumps(fig, indent=1))


if __name__ == "__main__":
    main()
