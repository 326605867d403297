#!/usr/bin/env bash
# One lent GPU call (about 15 device minutes a session): the GPU issue's checks, each under its own time limit, so one
# that fails or hangs leaves the others their time. Run on the device machine from the repository root with the
# wheels in .whl/ (bench/RESULTS.md, "On a GPU, fourth time", says which) and diffusion_policy's PushT store as uint8 in
# .gpu/pusht.zarr (`python bench/gpu_pusht.py --compact SRC .gpu/pusht.zarr`; both git-ignored, carried):
#   device run, carry [".whl", ".gpu"], timeout_s 600: bash bench/gpu_wave.sh   (the parts not yet measured, ≤ 9.5 min)
#   PARTS="pusht probe profile fsdp" bash bench/gpu_wave.sh                 (what ran on 2026-11-29, ≈ 9.5 min)
# Parts: pusht (the image recipe eager, trained --train-s and scored), pusht_compiled (the same under
# training.compile=true), probe (the compiled camera transformer's variants), fault_debug (the faulting `encoder`
# variant under TORCH_COMPILE_DEBUG, its generated kernels brought back), profile (the 1.1 B loop profiled), graphs (the
# 1.1 B bare step compiled, default and CUDA graphs), fsdp (fsdp vs ddp, camera policy), fsdp_big (dpt train at 1.1 B
# under fsdp). Logs and JSON land in $OUT (or /tmp/gpu_wave).
set -u
OUT=${OUT:-/tmp/gpu_wave}; mkdir -p "$OUT"
PARTS=${PARTS:-"pusht_compiled graphs fault_debug fsdp_big"}
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
say() { echo "== $(( $(date +%s) - t0 )) s: $*" | tee -a "$OUT/wave.log"; }
free_gpu() {   # a part stopped by its limit may leave ranks or workers holding the device
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | xargs -r kill -9 2>/dev/null; sleep 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$OUT/wave.log"

for part in $PARTS; do
  say "$part"
  case $part in
    pusht|pusht_compiled)
      c=false; ts=${TRAIN_S:-70}; [ "$part" = pusht_compiled ] && c=true   # ts: training after the first log step
      timeout -k 5 ${PUSHT_S:-240} python3 bench/gpu_pusht.py --store .gpu/pusht.zarr --train-s $ts \
        --compile $c --episodes 50 --workers 2 --out /tmp/$part --json "$OUT/$part.json" 2>&1 \
        | grep -v "^step \|pkg_resources\|resource_stream" | tee "$OUT/$part.log" ;;
    probe)
      timeout -k 5 60 python3 bench/gpu_compile_probe.py denoiser 2>&1 | tail -n 30 | tee "$OUT/probe.log"
      free_gpu
      ( timeout -k 5 70 python3 bench/gpu_compile_probe.py encoder > /tmp/probe_enc.log 2>&1 &
        timeout -k 5 70 python3 bench/gpu_compile_probe.py nosplit > /tmp/probe_ns.log 2>&1 & wait )
      tail -n 30 /tmp/probe_enc.log /tmp/probe_ns.log | tee -a "$OUT/probe.log" ;;
    fault_debug)   # the kernels inductor generated for the faulting variant, with the launch that faulted
      rm -rf /tmp/tcd
      TORCH_COMPILE_DEBUG=1 TORCH_COMPILE_DEBUG_DIR=/tmp/tcd CUDA_LAUNCH_BLOCKING=1 TORCH_LOGS=output_code \
        timeout -k 5 ${FAULT_S:-90} python3 bench/gpu_compile_probe.py encoder > /tmp/fault.log 2>&1
      tail -n 60 /tmp/fault.log | tee "$OUT/fault_debug.log"
      find /tmp/tcd -name 'output_code.py' 2>/dev/null | head -20 | tar czf "$OUT/fault_kernels.tgz" -T - 2>/dev/null
      ls -la "$OUT/fault_kernels.tgz" ;;
    profile)
      timeout -k 5 100 python3 bench/gpu_loop_profile.py --json "$OUT/prof.json" 2>&1 | grep -v "^step " \
        | tee "$OUT/prof.log" ;;
    graphs)
      timeout -k 5 ${GRAPHS_S:-130} python3 bench/gpu_loop_profile.py --modes default,reduce-overhead --no-loop \
        --json "$OUT/graphs.json" 2>&1 | tee "$OUT/graphs.log" ;;
    fsdp)
      timeout -k 5 ${FSDP_S:-150} python3 bench/gpu.py --steps 40 --warmup-steps 15 --log-every 5 --gb 0.2 --reps 15 \
        --skip naive,compiled,fp32 --families '' --strategies fsdp --json "$OUT/fsdp.json" 2>&1 | grep -v writing \
        | tee "$OUT/fsdp.log" ;;
    fsdp_big)
      timeout -k 5 ${FSDP_BIG_S:-110} python3 bench/gpu_big.py --layers 16 --steps 8 --loop-layers 16 --loop-steps 40 \
        --no-loop-ac --loop-strategy fsdp --json "$OUT/fsdp_big.json" 2>&1 | grep -v "^step " | tee "$OUT/fsdp_big.log" ;;
    *) say "unknown part $part" ;;
  esac
  free_gpu
done
say "done"
