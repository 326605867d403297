#!/usr/bin/env bash
# The run folders tests/test_layers.py resumes: written by dptoolkit as of commit 76abf79 (before the strategy object,
# issue 65), so that a checkpoint of the old layout must keep loading. Run from the repository root with that commit
# installed; each is the tiny low-dim test policy, 4 steps, its last checkpoint kept.
set -euo pipefail
out=tests/data/runs_0.1.0
common=(--config test --data data/tasks/beat_block_hammer.zarr --no-progress training.max_steps=4
        training.checkpoint_every=2 training.keep_checkpoints=1 policy.down_dims=[16,32]
        policy.diffusion_step_embed_dim=16)
rm -rf "$out/ddp" "$out/fsdp"
dpt train "${common[@]}" --nprocs 1 --out "$out/ddp"
dpt train "${common[@]}" --nprocs 2 --out "$out/fsdp" training.strategy=fsdp
rm -f "$out"/*/.lock
