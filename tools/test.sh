#!/usr/bin/env bash
# The one test command (README: `make test`): sync check, the notebooks, then pytest.
# The notebooks run once, in real Jupyter kernels, while the docs site is built (tools/build_docs.py executes every
# chapter and fails on the first cell that raises: the notebooks' test_eq checks are the notebook tests); pytest's browser
# test then reads that same site (DPT_SITE) instead of executing every chapter a second time. `make nbtest` runs
# nbdev_test on its own.
# Most tests wait on real processes (rank start-up, Slurm, kernels, a browser): measured on the 2-core machine, the
# parallel test files keep the cores about half busy. So the docs build runs beside them (one kernel at a time), and two
# test files run at once (a file's tests stay together: their module fixtures, and the Slurm tests share one cluster).
# DPT_TEST_WORKERS=0 runs the test files one by one, DPT_DOCS_BESIDE=0 builds the docs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/check_sync.sh
site=${DPT_SITE:-_site}
# the suite's runs and the chapters' runs at once: each keeps its fixed thread count (no sharing between them)
export DPT_SHARE_CORES=0
docs_log=$(mktemp); docs_pid=""
trap '[ -n "$docs_pid" ] && kill "$docs_pid" 2>/dev/null; rm -f "$docs_log"' EXIT
build_docs() {
  echo "== notebooks: every chapter executed while building the docs site =="
  python3 tools/build_docs.py --out "$site"
}
if [ "${DPT_DOCS_BESIDE:-1}" = 0 ]; then build_docs; else build_docs >"$docs_log" 2>&1 & docs_pid=$!; fi
echo "== pytest (tests/): two test files at a time${docs_pid:+, the docs build beside them} =="
workers=${DPT_TEST_WORKERS:-2}
par=(); [ "$workers" != 0 ] && par=(-n "$workers" --dist loadfile)
rc=0
python3 -m pytest -q --durations=30 "${par[@]}" -m "not solo" --ignore=tests/test_docs.py tests "$@" || rc=$?
if [ -n "$docs_pid" ]; then
  drc=0; wait "$docs_pid" || drc=$?; docs_pid=""
  grep -v "Kernel is running over TCP" "$docs_log" || true
  [ "$drc" = 0 ] || { echo "docs build failed (exit $drc)"; exit "$drc"; }
fi
[ "$rc" = 0 ] || exit "$rc"
export DPT_SITE="$(cd "$site" && pwd)"
echo "== pytest: the site in a browser =="
python3 -m pytest -q tests/test_docs.py "$@" || [ $? = 5 ]
echo "== pytest: timing-sensitive tests, alone on the machine =="
python3 -m pytest -q -m solo tests "$@" || [ $? = 5 ]   # 5: the tests asked for hold none of them
