#!/usr/bin/env bash
# The main job on a fresh machine: set up kforge's virtualenv, evaluate every solution into the default db, show
# the leaderboard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${KFORGE_VENV:-.venv}/bin/activate"  # its kforge and ninja (torch's C++ builds call `ninja`) come first
kforge problems
kforge evaluate solutions/
kforge leaderboard
