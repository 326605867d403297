#!/usr/bin/env bash
# The one test command (README: `make test`): sync check, the notebooks, then pytest.
# The notebooks run once, in real Jupyter kernels, while the docs site is built (tools/build_docs.py executes every
# chapter and fails on the first cell that raises: the notebooks' test_eq checks are the notebook tests); pytest's browser
# test then reads that same site (DPT_SITE) instead of executing every chapter a second time. `make nbtest` runs
# nbdev_test on its own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/check_sync.sh
echo "== notebooks: every chapter executed while building the docs site =="
site=${DPT_SITE:-_site}
python3 tools/build_docs.py --out "$site"
echo "== pytest (tests/): two test files at a time =="
# Most tests wait on real processes (rank start-up, Slurm, kernels, a browser), so a 2-core machine runs two test
# files at once at little cost; a file's tests stay together (their module fixtures, and the Slurm tests share one
# cluster). DPT_TEST_WORKERS=0 runs them one by one.
workers=${DPT_TEST_WORKERS:-2}
par=(); [ "$workers" != 0 ] && par=(-n "$workers" --dist loadfile)
export DPT_SITE="$(cd "$site" && pwd)"
python3 -m pytest -q --durations=30 "${par[@]}" -m "not solo" tests "$@"
echo "== pytest: timing-sensitive tests, alone on the machine =="
python3 -m pytest -q -m solo tests "$@" || [ $? = 5 ]   # 5: the tests asked for hold none of them
