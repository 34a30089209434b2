"""User settings from the environment (KFORGE_*), with one clear default for each. The only reader of the
environment: the packages take what they need from here, as parameters or as their own settings models."""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.llm import LLMSettings

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KFORGE_")

    db: str | None = None  # any SQLAlchemy URL; default sqlite:///~/.kforge/kforge.db
    device: str | None = None  # cpu | cuda; default: cuda when available
    build_root: Path | None = None  # compiled-extension cache; default ~/.cache/kforge/builds
    problems_dir: Path | None = None  # where `kforge problems import` puts files; default ~/.kforge/problems
    timeout_s: float | None = None  # None: the evaluator's own default (evaluator.contracts.Limits)
    memory_mb: int | None = None
    sandbox: str = "strict"  # strict: refuse to run when a sandbox layer is missing; warn: run and record it
    fork_server: bool = True  # children forked from one server that imported torch once; 0: each its own interpreter
    forward_server: bool = True  # CPU candidates timed and read by kforge's own process (EvalSettings.forward_server)
    cuda_forward_server: bool = False  # the same on CUDA, by the comparer's stream (EvalSettings.cuda_forward_server)

    @field_validator("problems_dir", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """KFORGE_PROBLEMS_DIR= (empty) means the default dir, not the current one."""
        return value or None


class LLMEnv(BaseSettings, LLMSettings):
    """pipeline.llm.LLMSettings read from KFORGE_LLM_* (KFORGE_LLM_PRICES as JSON: {"MODEL": {"prompt": USD,
    "completion": USD}} per 1M tokens)."""

    model_config = SettingsConfigDict(env_prefix="KFORGE_LLM_")

    def settings(self) -> LLMSettings:
        """The values alone, as the pipeline takes them."""
        return LLMSettings(**dict(self))
