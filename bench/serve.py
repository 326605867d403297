"""`dpt serve` measured (issue 104): the round trip of a chunk through the websocket against the bare `predict_action`
call in the same run, with 1, 4 and 16 clients; how many observations a client streams with three 224×224 cameras;
and ALOHA's episodes played through openpi-client (its own environment) against `dpt rollout` on the same seeds.

    python bench/serve.py latency                      # small U-Net and transformer camera policies it trains itself
    python bench/serve.py episodes RUN --client-python /path/to/openpi-client-env/bin/python --episodes 50

The episodes' robot side (bench/serve_robot.py) runs in the openpi-client environment beside our simulator module:
    python -m venv /tmp/opc && /tmp/opc/bin/pip install openpi-client==0.1.2 typing_extensions gym-aloha \\
        fastcore 'zarr>=3' 'numpy<2' && /tmp/opc/bin/pip install --no-deps -e .
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, threading, time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def _pct(xs, q): return float(np.percentile(np.asarray(xs), q))


def small_run(tmp: Path, denoiser: str) -> Path:
    "A camera policy (head_camera 3×24×32 + state 14) trained 2 steps: only its speed is measured."
    from dptoolkit.config import for_store
    from dptoolkit.store import sample_data
    from dptoolkit.train import train
    store = sample_data(tmp / "data", tasks=1, episodes=4, image=True, seed=2, overwrite=True)[0]
    over = ["training.max_steps=2", "training.checkpoint_every=0", "dataloader.batch_size=4",
            "policy.down_dims=[64,128]", "policy.diffusion_step_embed_dim=64", "policy.obs_encoder.backbone=small",
            "policy.num_inference_steps=10", f"policy.denoiser={denoiser}"]
    if denoiser == "transformer": over += ["policy.transformer.n_layer=4", "policy.transformer.n_emb=128"]
    return Path(train(for_store(store, over, name="test"), nprocs=1, run_dir=tmp / denoiser, progress=False).run_dir)


def latency(run: Path, chunks: int = 60) -> list:
    "Per-chunk milliseconds: the bare predict_action call (Served.step) and the websocket round trip, 1/4/16 clients."
    from websockets.sync.client import connect
    from dptoolkit.serve import Served, PolicyServer, packb, unpackb
    s = Served(run, device="cpu")
    r = np.random.default_rng(0)
    obs = {"state": r.normal(size=14), "images": {"head": r.integers(0, 255, (24, 32, 3), dtype=np.uint8)}}
    from dptoolkit.protocol import predict
    ep = s.episode()
    for _ in range(5): s.step(ep, obs)
    win = {k: torch.stack([h[k] for h in ep.hist])[None] for k in ep.hist[0]}
    bare, step = [], []
    for _ in range(chunks):      # the policy's own call on a ready window, then the same through Served.step
        t0 = time.perf_counter(); predict(s.policy, win, ep.generator); bare.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter(); s.step(ep, obs); step.append((time.perf_counter() - t0) * 1e3)
    rows = [dict(run=run.name, clients=0, p50=_pct(bare, 50), p99=_pct(bare, 99)),
            dict(run=run.name, clients=-1, p50=_pct(step, 50), p99=_pct(step, 99))]
    with PolicyServer(s, "127.0.0.1", 0) as srv:
        for n in (1, 4, 16):
            times = [[] for _ in range(n)]
            def client(i):
                with connect(srv.url, compression=None, max_size=None) as ws:
                    ws.recv()
                    for k in range(max(chunks // n, 8) + 3):
                        t0 = time.perf_counter(); ws.send(packb(obs)); unpackb(ws.recv())
                        if k >= 3: times[i].append((time.perf_counter() - t0) * 1e3)
            th = [threading.Thread(target=client, args=(i,)) for i in range(n)]
            t0 = time.perf_counter()
            for t in th: t.start()
            for t in th: t.join()
            wall = time.perf_counter() - t0
            flat = [x for t in times for x in t]
            rows.append(dict(run=run.name, clients=n, p50=_pct(flat, 50), p99=_pct(flat, 99),
                             chunks_per_s=sum(len(t) + 3 for t in times) / wall))
    return rows


def stream(run: Path, seconds: float = 5.0) -> dict:
    "Observations a second one client streams (act=False) with three 224×224 uint8 cameras, raw."
    from websockets.sync.client import connect
    from dptoolkit.serve import Served, PolicyServer, packb, unpackb
    r = np.random.default_rng(0)
    cams = {f"cam{i}": r.integers(0, 255, (224, 224, 3), dtype=np.uint8) for i in range(3)}
    msg = {"state": r.normal(size=14), "images": {"head": cams["cam0"], "left": cams["cam1"], "right": cams["cam2"]},
           "act": False}
    with PolicyServer(Served(run, device="cpu"), "127.0.0.1", 0) as srv, \
            connect(srv.url, compression=None, max_size=None) as ws:
        ws.recv()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            ws.send(packb(msg)); unpackb(ws.recv()); n += 1
        dt = time.perf_counter() - t0
    return dict(observations_per_s=n / dt, megabytes_per_s=n * len(packb(msg)) / dt / 1e6)


def episodes(run: Path, client_python: str, n: int, seed: int, task: str = "transfer_cube") -> dict:
    "ALOHA's episodes through openpi-client (bench/serve_robot.py in its own environment) and in process."
    from dptoolkit.serve import serve
    from dptoolkit.sim import rollout
    t0 = time.perf_counter()
    mine = rollout(str(run), task, episodes=n, workers=1, seed=seed, progress=False)
    t_in = time.perf_counter() - t0
    with serve(run, port=0, device="cpu") as srv:
        t0 = time.perf_counter()
        r = subprocess.run([client_python, str(HERE / "serve_robot.py"), str(srv.port), task, str(seed), str(n)],
                           capture_output=True, text=True, env={**os.environ, "MUJOCO_GL": "egl"})
        t_sock = time.perf_counter() - t0
    if r.returncode != 0: sys.exit(f"the robot side failed:\n{r.stderr[-3000:]}")
    theirs = json.loads(r.stdout)
    ours = mine.episodes.sort_values("seed").to_dict("records")
    same = [a["seed"] == b["seed"] and bool(a["success"]) == b["success"] and int(a["steps"]) == b["steps"]
            and float(a["ret"]) == b["ret"] for a, b in zip(ours, theirs)]
    return dict(run=str(run), task=task, episodes=n, seeds=f"{seed}..{seed + n - 1}",
                success_in_process=sum(bool(a["success"]) for a in ours), success_through_openpi_client=sum(
                    b["success"] for b in theirs), episodes_identical=sum(same), seconds_in_process=t_in,
                seconds_through_socket=t_sock)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["latency", "episodes"])
    ap.add_argument("run", nargs="?")
    ap.add_argument("--client-python")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=100000)
    a = ap.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    if a.what == "latency":
        with tempfile.TemporaryDirectory() as d:
            runs = [small_run(Path(d) / k, k) for k in ("unet", "transformer")]
            print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores")
            for run in runs:
                for row in latency(run):
                    bare = row if row["clients"] == 0 else bare
                    what = {0: "predict_action", -1: "Served.step"}.get(row["clients"], f"{row['clients']:2d} client(s)")
                    extra = "" if row["clients"] == 0 else (f"  overhead p50 {row['p50'] - bare['p50']:+.2f} ms "
                                                          f"({row['p50'] / bare['p50']:.2f}×)")
                    if row["clients"] > 0: extra += f", {row['chunks_per_s']:.1f} chunks/s in all"
                    print(f"{row['run']:12s} {what:15s}: p50 {row['p50']:7.2f} ms  p99 {row['p99']:7.2f} ms{extra}")
            print("stream, 3 cameras 224×224 raw:", json.dumps({k: round(v, 1) for k, v in stream(runs[0]).items()}))
    else:
        print(json.dumps(episodes(Path(a.run), a.client_python, a.episodes, a.seed), indent=1))
