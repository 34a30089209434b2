#!/usr/bin/env bash
# Set up kforge's virtualenv (scripts/setup.sh) and run the whole test suite in it (GPU tests skip themselves
# without a CUDA device). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${KFORGE_VENV:-.venv}/bin/activate"  # its python, kforge and ninja (torch's C++ builds call `ninja`) come first
python -m pytest -ra "$@"   # exits 5 (a failure here) if no test was collected
