#!/usr/bin/env bash
# Re-pin requirements.lock: a fresh virtualenv with every extra, resolved without the old pins, then frozen. torch
# is left out (setup.sh picks its build for each machine), and so is kforge itself.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
extras=$(python3 -c 'import tomllib; print(",".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]))')
: >requirements.lock
KFORGE_VENV=$tmp/venv KFORGE_EXTRAS=$extras bash scripts/setup.sh
{ echo "# The versions of a fresh install with every extra ($extras), written by scripts/lock.sh; scripts/setup.sh"
  echo "# installs with -c requirements.lock, so CI tests exactly these. torch is pinned in setup.sh."
  "$tmp/venv/bin/python" -m pip freeze --exclude-editable | grep -v '^torch=='; } >"$tmp/lock"
mv "$tmp/lock" requirements.lock
