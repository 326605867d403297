"""One training step of RoboTwin's camera policy (robot_dp_14: ResNet-18 on a 3×240×320 head camera + 14-dim state,
96.8 M parameters) against the low-dim robot_dp_14 (the same U-Net conditioned on the state alone), in the same run.

A step is what train_worker does per batch: forward (random crop off, as RoboTwin's config), backward, fused AdamW, EMA
update. Batches are random uint8 frames / float states already in memory, so only the model is timed. Prints the median
of --reps steps after --warmup, samples/s and the camera/low-dim ratio. On CUDA: steps are synchronised before the clock
is read; --bf16 wraps the forward in autocast, --compile uses torch.compile.
Usage: python bench/policy.py [--device cpu|cuda] [--batch 8] [--reps 5] [--threads 2] [--bf16] [--compile]
"""
import argparse, contextlib, statistics, time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu"); ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5); ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2); ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    import torch
    from dptoolkit.config import load_config
    from dptoolkit.policy import DiffusionPolicy
    from dptoolkit.train import _adamw, EMA
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    amp = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if a.bf16 else contextlib.nullcontext
    B, rows = a.batch, []
    for name, ov in (("camera (ResNet-18, 3×240×320)", []),
                     ("low-dim (state only)", ["task.dataset.obs_keys=[state]"])):
        cfg = load_config("robot_dp_14", ov)
        torch.manual_seed(0)
        model = DiffusionPolicy.from_config(cfg).to(dev)
        n = sum(p.numel() for p in model.parameters())
        net = torch.compile(model) if a.compile else model
        opt = _adamw(list(model.parameters()), lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-6)
        ema = EMA(model)
        g = torch.Generator(device=dev); g.manual_seed(0)
        obs = {"state": torch.randn(B, 3, 14, device=dev)}
        if "head_camera" in cfg.task.dataset.obs_keys:
            obs["head_camera"] = torch.randint(0, 256, (B, 3, 3, 240, 320), dtype=torch.uint8, device=dev)
        batch = {"obs": obs, "action": torch.randn(B, 8, 14, device=dev)}
        ts = []
        for i in range(a.warmup + a.reps):
            sync(); t = time.perf_counter()
            with amp(): loss = net(batch, **model.draw(batch, g))   # random inputs drawn eagerly, as train_worker does
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); ema.update_parameters(model)
            sync(); ts.append(time.perf_counter() - t)
        med = statistics.median(ts[a.warmup:])
        rows.append((name, n, med, B / med))
        del model, net, opt, ema
    print(f"robot_dp_14 training step, batch {B}, {a.device}" + (f", {a.threads} thread(s)" if dev.type == "cpu" else "")
          + (", bf16" if a.bf16 else "") + (", torch.compile" if a.compile else "") + f", median of {a.reps}:")
    for name, n, med, sps in rows:
        print(f"  {name:32s} {n / 1e6:6.1f} M params  {med * 1e3:9.1f} ms/step  {sps:9.1f} samples/s")
    print(f"  camera / low-dim step time: {rows[0][2] / rows[1][2]:.1f}×")


if __name__ == "__main__":
    main()
