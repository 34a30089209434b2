#!/usr/bin/env bash
# The wheels a GPU host without kforge's dependencies needs (it has torch, numpy, jinja2, ninja, but not pydantic,
# SQLAlchemy, typer, a matching openai...), at the versions this virtualenv holds, for CPython 3.12 on x86-64,
# into .whl/ (git-ignored); scripts/device_check.sh installs them there. Usage: bash scripts/device_wheels.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
NAMES="pydantic pydantic_core pydantic-settings python-dotenv annotated-types typing-inspection typing_extensions
 SQLAlchemy alembic Mako typer click rich markdown-it-py mdurl Pygments shellingham annotated-doc
 openai httpx2 httpcore2 httpx httpcore h11 anyio sniffio jiter idna certifi truststore landlockpy
 nvidia-ml-py pytest pluggy iniconfig pytest-timeout packaging"
mkdir -p .whl
for name in $NAMES; do
  version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name" 2>/dev/null) ||
    { echo "not in the virtualenv, skipped: $name (no longer a dependency of what is there)"; continue; }
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$name==$version" 2>&1 | grep -v '^WARNING: Location' || true
done
ls .whl | wc -l
