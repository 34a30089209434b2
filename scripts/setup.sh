#!/usr/bin/env bash
# kforge's own virtualenv, .venv/ in the repo root: torch built for this machine, then kforge (editable) with its
# extras, every other package at the version requirements.lock pins. Re-running is quick: nothing changed, nothing done.
#   KFORGE_EXTRAS  extras to install (default dev; CI: dev,postgres,ray)
#   KFORGE_VENV    where the virtualenv goes (default .venv)
#   KFORGE_PYTHON  the interpreter it is made from (default python3; 3.11 or newer)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${KFORGE_VENV:-.venv}
EXTRAS=${KFORGE_EXTRAS:-dev}
PYTHON=${KFORGE_PYTHON:-python3}
TORCH=2.13.0

# PyPI's Linux torch wheel is the CUDA build (multi-GB with its nvidia packages): only where a GPU is there to use it.
if nvidia-smi -L >/dev/null 2>&1; then
    build="CUDA build (nvidia-smi lists a GPU)" spec="torch==$TORCH" index=()
else
    build="CPU build (nvidia-smi lists no GPU)" spec="torch==$TORCH+cpu"
    index=(--index-url https://download.pytorch.org/whl/cpu)
fi

stamp="$VENV/.kforge-setup"  # what the last successful run installed
want="$spec [$EXTRAS] $(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "kforge setup: $VENV is up to date (torch $TORCH, ${build%% (*})"
    exit 0
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "kforge setup: $PYTHON is older than 3.11" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip install -q "$@"; }

echo "kforge setup: torch $TORCH, $build, into $VENV"
# A wheel pip already has at hand (its find-links: an offline machine) first, else PyTorch's index. Only torch
# itself: its dependencies come with kforge's below, pinned by the lock.
pip --no-index --no-deps "$spec" 2>/dev/null || pip --no-deps "${index[@]}" "$spec"
pip -c requirements.lock -e ".[$EXTRAS]"
echo "$want" >"$stamp"
