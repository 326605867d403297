"""Which part of the transformer + flow policy fails under torch.compile on CUDA? One variant per process (an illegal
memory access poisons the context): bare bf16 training steps (forward, backward, AdamW) at batch 128 on robot_dp_14's
camera policy, eager then compiled. Usage: python bench/gpu_compile_probe.py VARIANT
(cross | nocausal | adaln | unet | regional: the encoder and the denoiser compiled apart | denoiser: the denoiser alone
compiled, the camera encoder eager | encoder: the encoder alone compiled | nosplit: the whole model with inductor's
split reductions off | nopersist: ... with persistent reductions off)"""
import sys, time, traceback
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).parent))
from policies import FAMILY
from dataset import make_store
from dptoolkit.config import for_store, load_config
from omegaconf import OmegaConf

v = sys.argv[1]
store = Path("/tmp/probe.zarr")
if not store.exists(): make_store(store, 0.1)
extra = {"cross": [], "regional": [], "denoiser": [], "encoder": [], "nosplit": [], "nopersist": [],
         "nocausal": ["policy.transformer.causal_attn=false"], "adaln": ["policy.transformer.cond=adaln"]}
ov = FAMILY["unet+flow"] if v == "unet" else FAMILY["transformer+flow"] + extra[v]
f = Path(f"/tmp/probe-{v}.yaml"); f.write_text(OmegaConf.to_yaml(for_store(store, name="robot_dp_14")))
cfg = load_config(str(f), ov + [f"task.dataset.zarr_path={store}"])
from dptoolkit.normalize import Normalizer
from dptoolkit.policy import DiffusionPolicy
dev = torch.device("cuda")
keys = list(cfg.task.dataset.obs_keys)
torch.manual_seed(0)
norm = Normalizer.from_store(store, [k for k in keys if k != "head_camera"] + ["action"])
model = DiffusionPolicy.from_config(cfg, normalizer=norm).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
B, H, To = 128, cfg.horizon, cfg.n_obs_steps
hw = tuple(cfg.shape_meta.obs.head_camera)[1:]
batch = {"obs": {"state": torch.randn(B, To, 14, device=dev),
                 "head_camera": torch.randint(0, 256, (B, To, 3, *hw), dtype=torch.uint8, device=dev)},
         "action": torch.randn(B, H, 14, device=dev)}
g = torch.Generator(device=dev); g.manual_seed(0)
def run(net, n):
    for _ in range(n):
        with torch.autocast("cuda", dtype=torch.bfloat16): loss = net(batch, **model.draw(batch, g))
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16): loss = net(batch, **model.draw(batch, g))
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return 20 * B / (time.perf_counter() - t)
print(f"{v}: eager {run(model, 3):,.0f} samples/s", flush=True)
try:
    t = time.perf_counter()
    if v == "regional":   # the observation encoder and the denoiser compiled apart, the loss around them eager
        model.obs_encoder.compile(); model.model.compile()
        net = model
    elif v in ("denoiser", "encoder"):   # one part compiled, the rest eager
        (model.model if v == "denoiser" else model.obs_encoder).compile()
        net = model
    elif v in ("nosplit", "nopersist"):
        import torch._inductor.config as ic
        if v == "nosplit": ic.split_reductions = False
        else: ic.triton.persistent_reductions = False
        net = torch.compile(model)
    else: net = torch.compile(model)
    sps = run(net, 3)
    print(f"{v}: compiled {sps:,.0f} samples/s (compile + 23 steps {time.perf_counter() - t:.0f} s)", flush=True)
except Exception as e:
    print(f"{v}: compiled FAILED: {type(e).__name__}: {str(e).splitlines()[0]}")
    print("".join(traceback.format_exc().splitlines(keepends=True)[-25:]))
