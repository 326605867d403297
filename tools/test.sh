#!/usr/bin/env bash
# The one test command (README: `make test`): sync check, notebook tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/check_sync.sh
echo "== nbdev_test (notebooks) =="
nbdev_test --n_workers "${DPT_NB_WORKERS:-2}" --timing
echo "== pytest (tests/) =="
python3 -m pytest -q tests "$@"
