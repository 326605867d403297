#!/usr/bin/env bash
# One-command set-up for dptoolkit (README: `make setup`). Safe to run again.
#  - torch first, so pip never swaps it: an existing torch is kept; with an NVIDIA GPU the
#    default (CUDA) build is installed; without one the CPU build (torch==2.13.0 here).
#    Override with DPT_TORCH_SPEC="torch==X" and, where the CPU wheels live on another
#    index, DPT_TORCH_INDEX=<index url>.
#  - then the package in editable mode with its dev extras (nbdev, jupyterlab, pytest, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install --disable-pip-version-check --no-input "$@"; }

if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: keeping installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
  idx=()
  [ -n "${DPT_TORCH_INDEX:-}" ] && idx=(--index-url "$DPT_TORCH_INDEX")
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    spec=${DPT_TORCH_SPEC:-torch}
    echo "setup: NVIDIA GPU found: installing $spec (CUDA build)"
  else
    spec=${DPT_TORCH_SPEC:-torch==2.13.0}
    echo "setup: no GPU: installing $spec (CPU build)"
  fi
  pip_install "${idx[@]}" "$spec"
fi
pip_install -e ".[dev]"
"$PY" -c "import dptoolkit, torch; print(f'setup: dptoolkit {dptoolkit.__version__} ready (torch {torch.__version__}, cuda={torch.cuda.is_available()})')"
