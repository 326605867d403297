#!/usr/bin/env bash
# Fail when the notebooks in nbs/ and the library in dptoolkit/ are out of step, or when a
# notebook is not clean (outputs/metadata noise that nbdev_clean would strip), or when the house's shape slips
# (tools/check_style.py: lines over 120 characters, ';'-joined statements, exported cells over 60 lines).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}   # the interpreter `make setup` installed into: nbdev through it, not through a name on PATH
snap() { find "$@" -type f \( -name '*.py' -o -name '*.ipynb' \) -not -path '*/.ipynb_checkpoints/*' -print0 | sort -z | xargs -0 sha256sum; }
before_lib=$(snap dptoolkit); "$PY" -c 'from nbdev.doclinks import nbdev_export; nbdev_export()'; after_lib=$(snap dptoolkit)
if [ "$before_lib" != "$after_lib" ]; then
  echo "check: nbdev_export changed dptoolkit/ — the library was out of step with nbs/:" >&2
  diff <(echo "$before_lib") <(echo "$after_lib") >&2 || true
  exit 1
fi
before_nb=$(snap nbs); "$PY" -c 'from nbdev.clean import nbdev_clean; nbdev_clean()'; after_nb=$(snap nbs)
if [ "$before_nb" != "$after_nb" ]; then
  echo "check: nbdev_clean changed notebooks — commit them cleaned:" >&2
  diff <(echo "$before_nb") <(echo "$after_nb") >&2 || true
  exit 1
fi
"$PY" tools/make_readme.py --check
"$PY" tools/check_style.py
echo "check: notebooks, library and README in step; notebooks clean; lines ≤ 120, cells ≤ 60"
