#!/usr/bin/env bash
# The one test command (README: `make test`): sync check, then the notebooks and pytest side by side, then the
# timing-sensitive tests alone.
# The notebooks run once, in real Jupyter kernels, while the docs site is built (tools/build_docs.py executes every
# chapter and fails on the first cell that raises: the notebooks' test_eq checks are the notebook tests); pytest's browser
# test then reads that same site (DPT_SITE) instead of executing every chapter a second time. `make nbtest` runs
# nbdev_test on its own.
# Side by side: the docs build runs one chapter at a time and leaves about a third of a 2-core machine idle (kernel
# start-up, waits on ranks), pytest's two workers leave none, and neither is any shorter for running alone. The browser
# test waits for the site (DPT_SITE_RC: the build's exit status, written when it ends) while the other worker goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}   # the interpreter `make setup` installed into (Makefile: PYTHON)
bash tools/check_sync.sh
site=${DPT_SITE:-_site}
mkdir -p "$site"
export DPT_SITE="$(cd "$site" && pwd)"
tmp=$(mktemp -d)
export DPT_SITE_RC="$tmp/docs.rc"
docs_log="$tmp/docs.log"
echo "== notebooks (every chapter executed while building the docs site: $docs_log) and pytest, side by side =="
# Three streams of work on two cores: OpenMP threads that wait for their team by spinning (GNU OpenMP's default) burn
# the cores the others need (a chapter computing in its kernel beside two busy processes: 674 s, 22 s alone); waiting
# threads sleep instead. Only here: on a quiet machine spinning is what makes a small model's CPU step fast (2.6× here),
# and the timing-sensitive tests below, alone on the machine, measure the default.
omp_before=${OMP_WAIT_POLICY-unset}
export OMP_WAIT_POLICY=PASSIVE
( rc=0; "$PY" tools/build_docs.py --out "$DPT_SITE" >"$docs_log" 2>&1 || rc=$?
  echo "$rc" > "$DPT_SITE_RC.tmp" && mv "$DPT_SITE_RC.tmp" "$DPT_SITE_RC" ) &
docs=$!
trap 'kill $docs 2>/dev/null || true; rm -rf "$tmp"' EXIT
# Most tests wait on real processes (rank start-up, Slurm, kernels, a browser), so a 2-core machine runs two test
# files at once at little cost; a file's tests stay together (their module fixtures, and the Slurm tests share one
# cluster). DPT_TEST_WORKERS=0 runs them one by one.
workers=${DPT_TEST_WORKERS:-2}
par=(); [ "$workers" != 0 ] && par=(-n "$workers" --dist loadfile)
rc=0
"$PY" -m pytest -q --durations=60 "${par[@]}" -m "not solo" tests "$@" || rc=$?
wait "$docs" || true
echo "== the docs build (finished beside pytest) =="
grep -v "Kernel is running over TCP without encryption" "$docs_log" || true
docs_rc=$(cat "$DPT_SITE_RC" 2>/dev/null || echo "?")
if [ "$docs_rc" != 0 ]; then echo "test: the docs build failed (exit $docs_rc)"; exit 1; fi
[ "$rc" = 0 ] || exit "$rc"
echo "== pytest: timing-sensitive tests, alone on the machine =="
# alone includes the kernel: what the stage above left in the page cache (runs, stores, the docs build's scratch) is
# written back now, not by kernel threads while the quiet sweep measures (a fresh-venv CI run here was flagged there)
sync
if [ "$omp_before" = unset ]; then unset OMP_WAIT_POLICY; else export OMP_WAIT_POLICY="$omp_before"; fi
"$PY" -m pytest -q -m solo tests "$@" || [ $? = 5 ]   # 5: the tests asked for hold none of them
