#!/usr/bin/env bash
# One lent GPU call (about 15 device minutes a session), the four checks of issue 82 each under its own time limit, so
# one that fails or hangs leaves the others their time. Run on the device machine from the repository root with the
# wheels in .whl/ (bench/RESULTS.md says which) and diffusion_policy's PushT store as uint8 in .gpu/pusht.zarr
# (`python bench/gpu_pusht.py --compact SRC .gpu/pusht.zarr`; both git-ignored, carried):
#   device run, carry [".whl", ".gpu"]: bash bench/gpu_wave.sh
# Logs and JSON land in $OUT (or /tmp/gpu_wave).
set -u
OUT=${OUT:-/tmp/gpu_wave}; mkdir -p "$OUT"
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
say() { echo "== $(( $(date +%s) - t0 )) s: $*" | tee -a "$OUT/wave.log"; }
free_gpu() {   # a part stopped by its limit may leave ranks or workers holding the device
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | xargs -r kill -9 2>/dev/null; sleep 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$OUT/wave.log"

say "1. PushT image policy at diffusion_policy's recipe (issue 79, 82.4)"
timeout -k 5 ${PUSHT_S:-250} python3 bench/gpu_pusht.py --store .gpu/pusht.zarr --train-s ${TRAIN_S:-130} \
  --episodes 50 --workers 2 --out /tmp/pusht --json "$OUT/pusht.json" 2>&1 | tee "$OUT/pusht.log" | grep -v "^step "
free_gpu

say "2. the compiled transformer: which part faults (82.2)"
timeout -k 5 60 python3 bench/gpu_compile_probe.py denoiser 2>&1 | tail -30 | tee "$OUT/probe.log"
free_gpu
( timeout -k 5 60 python3 bench/gpu_compile_probe.py encoder > /tmp/probe_enc.log 2>&1 &
  timeout -k 5 60 python3 bench/gpu_compile_probe.py nosplit > /tmp/probe_ns.log 2>&1 & wait )
tail -n 30 /tmp/probe_enc.log /tmp/probe_ns.log | tee -a "$OUT/probe.log"
free_gpu

say "3. the loop at 1.1 B parameters against its bare step, profiled (82.3)"
timeout -k 5 100 python3 bench/gpu_loop_profile.py --json "$OUT/prof.json" 2>&1 | grep -v "^step " | tee "$OUT/prof.log"
free_gpu

say "4. FSDP2 against DDP on the camera policy, world 1 (82.1)"
timeout -k 5 ${FSDP_S:-150} python3 bench/gpu.py --steps 50 --warmup-steps 20 --log-every 5 --gb 0.2 --reps 20 \
  --skip naive,compiled,fp32 --families '' --strategies fsdp --json "$OUT/fsdp.json" 2>&1 | tee "$OUT/fsdp.log"
free_gpu
say "done"
