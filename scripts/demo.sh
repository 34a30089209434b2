#!/usr/bin/env bash
# The main job on a fresh machine: install, evaluate every solution into the default db, show the leaderboard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
kforge problems
kforge evaluate solutions/
kforge leaderboard
