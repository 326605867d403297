#!/usr/bin/env bash
# The README's set-up, `dpt demo` and a quick subset of the tests on each other Python this machine has (issue 102).
# CI runs the whole suite on one interpreter (the default python3, 3.11 here) and keeps its time; this script is how the
# others are checked, by hand or on a machine with pyenv, its figures going to bench/RESULTS.md. For each of 3.12 and
# 3.13 it finds (pyenv, else python3.12 / python3.13 on PATH; PYTHONS="/path/a /path/b" names them), in a fresh
# virtualenv: `make setup PYTHON=...` (the simulators without wheels for it said in one line), `dpt demo`, and
# pytest on tests/test_any_robot.py, tests/test_cli_help.py and tests/test_readme.py. It says what it ran and how long
# each part took; a version it cannot find is said and skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pyenv root 2>/dev/null || true)
find_py() {   # 3.12 -> an interpreter of that version, or nothing
  local v=$1 p
  for p in ${root:+"$root"/versions/"$v".*/bin/python} "$(command -v "python$v" 2>/dev/null)"; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
}
pys=${PYTHONS:-"$(find_py 3.12) $(find_py 3.13)"}
work=$(mktemp -d)
rc=0
for py in $pys; do
  v=$("$py" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))') || continue
  env="$work/py$v"
  echo "== Python $v ($py) =="
  "$py" -m venv "$env" || { echo "python_versions: $py cannot make a virtualenv"; rc=1; continue; }
  t0=$SECONDS
  PYTHON="$env/bin/python" bash tools/setup.sh >"$work/setup$v.log" 2>&1
  st=$?
  t1=$SECONDS
  grep '^setup:' "$work/setup$v.log"
  echo "python_versions: $v set-up exit $st: $((t1 - t0)) s"
  [ "$st" = 0 ] || { rc=1; continue; }
  (cd "$work" && "$env/bin/python" -m dptoolkit.cli demo --out "$work/demo$v" >"$work/demo$v.log" 2>&1) \
    && echo "python_versions: $v dpt demo: $((SECONDS - t1)) s" \
    || { echo "python_versions: $v dpt demo failed (log: $work/demo$v.log)"; rc=1; }
  t2=$SECONDS
  "$env/bin/python" -m pytest -q -p no:cacheprovider tests/test_any_robot.py tests/test_cli_help.py tests/test_readme.py \
    2>&1 | tail -1 | sed "s/^/python_versions: $v pytest subset: /" || rc=1
  echo "python_versions: $v pytest subset: $((SECONDS - t2)) s"
done
[ -n "${pys// /}" ] || echo "python_versions: neither Python 3.12 nor 3.13 found (PYTHONS= names interpreters)"
exit $rc
