#!/usr/bin/env bash
# Set up kforge's virtualenv (scripts/setup.sh) and run the whole test suite in it (GPU tests skip themselves
# without a CUDA device). With arguments, pytest runs just those (bash scripts/test.sh -k leaderboard). Without,
# the suite runs in two parts sharing one build cache: every module but the timed ones on parallel workers
# (KFORGE_TEST_WORKERS, default 2), then the timed ones (tests/conftest.py TIMED_MODULES) alone, so nothing else
# runs beside what they measure. Exits non-zero if either part failed or collected no test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${KFORGE_VENV:-.venv}/bin/activate"  # its python, kforge and ninja (torch's C++ builds call `ninja`) come first
if [ $# -gt 0 ]; then
  exec python -m pytest -ra "$@"   # exits 5 (a failure here) if no test was collected
fi
export KFORGE_TEST_BUILD_ROOT=${KFORGE_TEST_BUILD_ROOT:-$(mktemp -d /tmp/kforge-test-builds.XXXXXX)}
rc=0
python -m pytest -ra -n "${KFORGE_TEST_WORKERS:-2}" --dist loadfile -m "not timed" || rc=$?
python -m pytest -ra -m timed || rc=$((rc ? rc : $?))
exit $rc
