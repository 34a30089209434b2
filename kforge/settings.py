"""User settings from the environment (KFORGE_*), with one clear default for each."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KFORGE_")

    db: str | None = None  # any SQLAlchemy URL; default sqlite:///~/.kforge/kforge.db
    device: str | None = None  # cpu | cuda; default: cuda when available
    build_root: Path | None = None  # compiled-extension cache; default ~/.cache/kforge/builds
    timeout_s: float | None = None  # None: the evaluator's own default (evaluator.contracts.Limits)
    memory_mb: int | None = None
    sandbox: str = "strict"  # strict: refuse to run when a sandbox layer is missing; warn: run and record it
