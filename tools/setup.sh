#!/usr/bin/env bash
# One-command set-up for dptoolkit (README: `make setup`). Safe to run again.
#  - torch and torchvision first, as a matching pair, so pip never swaps them: an installed pair is
#    kept; a torch without torchvision gets the matching torchvision; with an NVIDIA GPU the default
#    (CUDA) builds are installed; without one torch==2.14.1 + torchvision==0.29.1 (a pair that imports
#    together; PyPI's torchvision does not load beside the torch==2.13.0 CPU wheel).
#    Override with DPT_TORCH_SPEC="torch==X torchvision==Y" and, where the wheels live on another
#    index, DPT_TORCH_INDEX=<index url>.
#  - then the package in editable mode with its dev extras (nbdev, jupyterlab, pytest, ...).
#  - then the simulators one at a time (gym-aloha, gym-pusht, Meta-World): one without wheels for this Python is said
#    in one line and skipped. DPT_SETUP_PARTS=sims runs this step alone.
#  - the installer is uv (pip-compatible; a fresh set-up here: 42 s against pip's 176 s, the same 218 packages at the
#    same versions), fetched into a throw-away folder, with pip's own configuration (index URLs, find-links,
#    constraints, certificate) carried over; pip where uv cannot be had or fails. DPT_INSTALLER=pip: pip only.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PY=$("$PY" -c 'import sys; print(sys.executable)')
UV="" uv_args=()
if [ "${DPT_INSTALLER:-uv}" = uv ]; then
  uvdir=$(mktemp -d)
  trap 'rm -rf "$uvdir"' EXIT
  if command -v uv >/dev/null 2>&1; then UV=$(command -v uv)
  elif "$PY" -m pip install -q --disable-pip-version-check --no-input --target "$uvdir" "uv>=0.5,<1" >/dev/null 2>&1 \
       && [ -x "$uvdir/bin/uv" ]; then UV="$uvdir/bin/uv"
  else echo "setup: uv could not be installed; using pip"; fi
  if [ -n "$UV" ]; then   # uv reads neither pip.conf nor PIP_* variables: `pip config list` has both
    while IFS= read -r line; do
      key=${line%%=*} val=${line#*=}; val=${val#\'}; val=${val%\'}
      case "${key##*.}" in
        index-url) opt=--index-url;; extra-index-url) opt=--extra-index-url;; find-links) opt=--find-links;;
        constraint) opt=--constraint;; cert) export SSL_CERT_FILE=${SSL_CERT_FILE:-$val}; continue;; *) continue;;
      esac
      for v in $val; do
        case " ${uv_args[*]-} " in *" $opt $v "*) ;; *) uv_args+=("$opt" "$v");; esac
      done
    done < <("$PY" -m pip config list 2>/dev/null || true)
  fi
fi
pip_install() {
  if [ -n "$UV" ]; then
    "$UV" pip install --python "$PY" --index-strategy unsafe-best-match --compile-bytecode ${uv_args[@]+"${uv_args[@]}"} "$@" \
      && return 0
    echo "setup: uv could not install $*; trying pip"
  fi
  "$PY" -m pip install --disable-pip-version-check --no-input "$@"
}

have() { "$PY" -c "import $1" >/dev/null 2>&1; }
idx=()
[ -n "${DPT_TORCH_INDEX:-}" ] && idx=(--index-url "$DPT_TORCH_INDEX")
if [ "${DPT_SETUP_PARTS:-all}" = all ]; then
  if have torch && have torchvision; then
    echo "setup: keeping installed torch $("$PY" -c 'import torch; print(torch.__version__)') / torchvision $("$PY" -c 'import torchvision; print(torchvision.__version__)')"
  elif have torch; then
    # torchvision's minor version is torch's + 15 (torch 2.14.x ↔ torchvision 0.29.x); pin torch so pip never swaps it
    tv=$("$PY" -c 'import torch; a, b = torch.__version__.split("+")[0].split(".")[:2]; print(f"0.{int(b) + 15}.*")')
    tver=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
    echo "setup: torch $tver is installed without torchvision: installing torchvision==$tv beside it"
    pip_install "${idx[@]}" "torch==$tver" "torchvision==$tv"
  else
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
      spec=${DPT_TORCH_SPEC:-torch torchvision}
      echo "setup: NVIDIA GPU found: installing $spec (CUDA build)"
    else
      spec=${DPT_TORCH_SPEC:-torch==2.14.1 torchvision==0.29.1}
      echo "setup: no GPU: installing $spec"
    fi
    # shellcheck disable=SC2086
    pip_install "${idx[@]}" $spec
  fi
  if ! have torchvision; then
    echo "setup: torchvision does not import beside this torch ($("$PY" -c 'import torchvision' 2>&1 | tail -1));" \
         "install a matching pair, e.g. DPT_TORCH_SPEC='torch==2.14.1 torchvision==0.29.1' in a fresh environment" >&2
    exit 1
  fi
  pip_install -e ".[dev]"
fi
# The simulators, one at a time (setup.py's `sim` extra, then Meta-World): one without wheels for this Python says so in
# one line, and everything else is still installed; the chapters and tests that play it skip, naming why. Nothing is
# built from source where wheels are missing (labmaze, under gym-aloha's dm-control, builds only with bazel).
pyver=$("$PY" -c 'import sys; print(".".join(map(str, sys.version_info[:2])))')
sim() {   # MODULE WHAT PACKAGE...
  local mod=$1 what=$2 log why; shift 2
  if have "$mod"; then return 0; fi
  log=$(mktemp)
  if pip_install --only-binary labmaze "$@" >"$log" 2>&1; then rm -f "$log"; echo "setup: $what installed"; return 0; fi
  why=$(grep -ioE "all versions of [a-z0-9_.-]+ have no usable wheels" "$log" | head -1 || true)   # uv: the package to blame
  [ -n "$why" ] || why=$(grep -ioE "(no matching distribution[^;]*|could not find a version[^;]*|no solution found[^;]*)" \
                         "$log" | head -1 | cut -c1-160 || true)
  rm -f "$log"
  echo "setup: $what cannot be installed on Python $pyver (${why:-see: $PY -m pip install $*}); everything else is" \
       "installed, and the chapters and tests that play it skip"
}
reqs() { "$PY" -c "import configparser, shlex; c = configparser.ConfigParser(delimiters=['=']); c.read('settings.ini')
print(' '.join(r for r in shlex.split(c['DEFAULT']['sim_requirements']) if r.split('>')[0].split('=')[0] in '$*'.split()))"; }
# shellcheck disable=SC2046
sim gym_aloha "gym-aloha (the ALOHA simulator)" $(reqs gym-aloha imageio imageio-ffmpeg)
# shellcheck disable=SC2046
sim gym_pusht "gym-pusht (the PushT simulator)" $(reqs gym-pusht)
# Meta-World (its chapter) pins mujoco==3.3.0, which gym-aloha's dm-control (mujoco>=3.8.1) cannot take: installed
# without its pins, on the mujoco gym-aloha brings (or, without gym-aloha, the newest), beside gymnasium and imageio
have mujoco || pip_install "mujoco>=3.3" >/dev/null 2>&1 || true
sim metaworld "Meta-World" --no-deps "metaworld==3.1.1"
if [ "${DPT_SETUP_PARTS:-all}" != all ]; then exit 0; fi
"$PY" -c "import dptoolkit, torch; import torchvision; print(f'setup: dptoolkit {dptoolkit.__version__} ready (torch {torch.__version__}, torchvision {torchvision.__version__}, cuda={torch.cuda.is_available()})')"
# the scripts just installed, callable by name in this shell: pyenv's shims made (uv makes none), or the one line to run
"$PY" tools/on_path.py
