"""The robot's side of bench/serve.py's episodes: ALOHA's simulator (the toolkit's simulator module, no torch) driven
through openpi-client's `WebsocketClientPolicy`, unchanged, in its own environment (numpy < 2).

    python bench/serve_robot.py PORT TASK FIRST_SEED EPISODES     # prints a JSON list, one dict per episode

Each step's observation goes to the server (`act=False` between chunks, so that a policy reading its last
n_obs_steps steps reads them); a chunk is asked for where `dpt rollout`'s loop asks for one, and its actions are
played until the episode succeeds, as that loop plays them."""
import json, sys

from openpi_client import websocket_client_policy

from dptoolkit.environments import make_env

port, task, first, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = websocket_client_policy.WebsocketClientPolicy("127.0.0.1", port)
meta = client.get_server_metadata()
obs_keys = list(meta["observation"])
cam = "head_camera" in obs_keys
size = tuple(meta["observation"]["head_camera"]["shape"][1:]) if cam else (48, 64)
env = make_env(task, obs_keys, cam, size)
out = []


def sent(o: dict) -> dict:
    return {"state": o["qpos"], **{k: o[k] for k in obs_keys if k != "state"}}


for seed in range(first, first + n):
    o = env.reset(seed)
    e = dict(seed=seed, success=False, steps=0, max_reward=0, ret=0.0)
    chunk = client.infer({**sent(o), "reset": True, "seed": seed})["actions"]
    while True:
        done = False
        for j, a in enumerate(chunk):
            o, r = env.step(a, render=True)
            top = r if e["steps"] == 0 else max(e["max_reward"], r)
            e.update(steps=e["steps"] + 1, max_reward=top, ret=e["ret"] + r)
            e["success"] = e["success"] or env.succeeded(r)
            done = e["success"] or e["steps"] >= 400
            if done: break
            if j < len(chunk) - 1: client.infer({**sent(o), "act": False})
        if done: break
        chunk = client.infer(sent(o))["actions"]
    e["ret"], e["max_reward"] = float(e["ret"]), float(e["max_reward"])
    out.append(e)
print(json.dumps(out))
