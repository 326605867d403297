"""Why a camera policy fails in closed loop (issue 36): two measurements on one checkpoint of a run trained on
`make_demos` data.
1. Open-loop action error, by phase of the task, on seeds it was trained on (read from the store) and on held-out
   seeds: the policy's chunk on the noise-free expert's observation against the expert's next actions. Memorising the
   demonstrations shows as a gap between the two rows.
2. One closed-loop episode beside the expert's: at each replan, how far the executed chunk is from the one the same
   policy (same sampling noise) predicts on the expert's observation at that step, and how much of that comes from its
   own `state` alone (its own qpos with the expert's frame). A policy that copies its own state keeps a deviation it
   made: the chunk moves with its qpos instead of back to the path.
Usage: python bench/sim_probe.py RUN [--checkpoint STEP] [--seeds 6] [--seed 1003] [--steps 60]
"""
import argparse, collections, os
os.environ.setdefault("MUJOCO_GL", "egl")
import torchvision  # noqa: F401  (before MuJoCo's EGL)
import numpy as np, torch
from dptoolkit.lockstep import _window   # the windows the one episode loop gives a policy

PHASES = ((0, 90, "reach"), (90, 170, "grasp + lift"), (170, 260, "transfer"))


def _obs(A, t, To, keys):
    idx = [max(t - i, 0) for i in range(To - 1, -1, -1)]
    out = {k: torch.from_numpy(A[k][idx])[None] for k in keys}
    return {k: v if v.dtype == torch.uint8 else v.float() for k, v in out.items()}   # frames stay uint8


def _predict(policy, obs, state=None):
    g = torch.Generator()
    if state is not None: g.set_state(state)
    else: g.manual_seed(0)
    with torch.no_grad(): return policy.predict_action(obs, generator=g)["action"][0].numpy()


def open_loop(policy, episodes: dict) -> dict:
    "Mean |action error| of the predicted chunks by phase, over `episodes` (seed → expert arrays)."
    keys, To, Ta = policy.low_dim_keys + policy.image_keys, policy.n_obs_steps, policy.n_action_steps
    errs = {name: [] for *_, name in PHASES}
    for A in episodes.values():
        for lo, hi, name in PHASES:
            for t in range(lo, hi, 10):
                a = _predict(policy, _obs(A, t, To, keys))[:Ta]
                errs[name].append(np.abs(a - A["action"][t:t + len(a)]).mean())
    return {k: float(np.mean(v)) for k, v in errs.items()}


def closed_loop(policy, sim, A, seed: int, steps: int) -> list:
    "Per replan: deviation of qpos from the expert's, and of the chunk from the expert-observation chunk."
    keys, To = policy.low_dim_keys + policy.image_keys, policy.n_obs_steps
    size = tuple(policy.obs_encoder.image_shapes["head_camera"][1:])
    env = sim.AlohaSim(camera=True, size=size)
    o = env.reset(seed)
    hist, g, t, rows = collections.deque([o] * To, maxlen=To), torch.Generator().manual_seed(seed), 0, []
    while t < steps:
        state = g.get_state()
        own = _window(policy, [hist], None, "cpu")
        with torch.no_grad(): chunk = policy.predict_action(own, generator=g)["action"][0].numpy()
        exp_obs = _obs(A, t, To, keys)
        on_expert = _predict(policy, exp_obs, state)
        own_state = _predict(policy, {**exp_obs, **{k: own[k] for k in policy.low_dim_keys}}, state)
        rows.append(dict(t=t, qpos_off=float(np.abs(hist[-1]["qpos"] - A["state"][t]).max()),
                         chunk_off=float(np.abs(chunk - on_expert).max()),
                         own_state_only=float(np.abs(own_state - on_expert).max()),
                         expert_chunk_err=float(np.abs(on_expert - A["action"][t:t + len(on_expert)]).max())))
        for a in chunk[:policy.n_action_steps]:
            o, _ = env.step(a); hist.append(o); t += 1
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run"); ap.add_argument("--checkpoint", type=int, help="step (default: the latest)")
    ap.add_argument("--seeds", type=int, default=6, help="training and held-out seeds each")
    ap.add_argument("--seed", type=int, default=1003, help="the closed-loop episode's seed")
    ap.add_argument("--steps", type=int, default=60, help="closed-loop steps")
    a = ap.parse_args()
    import pandas as pd, zarr
    from dptoolkit import aloha as sim   # the simulator and its experts (the aloha chapter)
    from dptoolkit.evaluate import load_policy
    ck = f"{a.run}/checkpoints/step_{a.checkpoint:06d}" if a.checkpoint else None
    policy, cfg = load_policy(a.run, checkpoint=ck)
    size = tuple(policy.obs_encoder.image_shapes["head_camera"][1:])
    trained = list(zarr.open_group(cfg.task.dataset.zarr_path, mode="r").attrs["sim"]["seeds"])[:a.seeds]
    held = list(range(100000, 100000 + a.seeds))
    eps = {s: sim.expert_episode("transfer_cube", s, camera=True, size=size)["arrays"] for s in trained + held}
    table = pd.DataFrame({f"trained on ({len(trained)} seeds)": open_loop(policy, {s: eps[s] for s in trained}),
                          f"held out ({len(held)} seeds)": open_loop(policy, {s: eps[s] for s in held})}).T
    print("open loop: mean |predicted − expert action| (rad) over each chunk, by phase\n" + table.round(4).to_string())
    A = eps.get(a.seed) or sim.expert_episode("transfer_cube", a.seed, camera=True, size=size)["arrays"]
    rows = pd.DataFrame(closed_loop(policy, sim, A, a.seed, a.steps))
    print(f"\nclosed loop, seed {a.seed}: max |deviation| (rad) at each replan\n"
          "  qpos_off: its qpos from the expert's; chunk_off: its chunk from the chunk on the expert's observation;\n"
          "  own_state_only: the same with only its own state swapped in; expert_chunk_err: that chunk vs the expert")
    print(rows.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
