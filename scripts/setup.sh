#!/usr/bin/env bash
# Install kforge and its dependencies into the current Python (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
# A CPU build of torch: plain `pip install torch` would pull a multi-GB CUDA build.
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q "torch==2.13.0"
python3 -m pip install -q -e ".[dev]"
