#!/usr/bin/env bash
# Install and run the whole test suite (GPU tests skip themselves without a CUDA device).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pytest -ra "$@"   # exits 5 (a failure here) if no test was collected
