"""AdamW step time: torch's default (per-tensor loop on CPU, foreach on CUDA), foreach, and fused -- train_worker uses fused.

The model is the overhead bench's (`test` config widened to down_dims [64, 128, 256], 4.1 M parameters in 148 tensors);
gradients are random. Prints the minimum over --reps steps of each variant, measured twice in alternation, and the ratio
to fused. On CUDA the steps are synchronised before the clock is read.
Usage: python bench/optimizer.py [--device cpu|cuda] [--reps 30]
"""
import argparse, time


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--device", default="cpu"); ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (a 2-rank CPU run gives each rank 1)")
    a = ap.parse_args()
    import torch
    from dptoolkit.config import load_config
    from dptoolkit.policy import DiffusionPolicy
    torch.set_num_threads(a.threads)
    cfg = load_config("test", ["policy.down_dims=[64,128,256]", "policy.n_groups=8"])
    m = DiffusionPolicy.from_config(cfg).to(a.device)
    for p in m.parameters(): p.grad = torch.randn_like(p)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    n = sum(p.numel() for p in m.parameters())
    best = {}
    for kind in ("default", "foreach", "fused") * 2:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, **({} if kind == "default" else {kind: True}))
        for _ in range(3): opt.step()
        ts = []
        for _ in range(a.reps):
            sync(); t = time.perf_counter(); opt.step(); sync(); ts.append(time.perf_counter() - t)
        best[kind] = min(best.get(kind, 1e9), min(ts))
    print(f"AdamW step, {n / 1e6:.1f} M parameters in {len(list(m.parameters()))} tensors, {a.device}"
          + (f", {a.threads} thread(s)" if a.device == "cpu" else "") + ":")
    for k, v in best.items(): print(f"  {k:8s} {v * 1e3:7.2f} ms   ({v / best['fused']:.2f}× fused)")


if __name__ == "__main__":
    main()
