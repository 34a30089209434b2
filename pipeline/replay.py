"""A provider that serves recorded answers: runs the whole pipeline with no network and no cost."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.llm import LLMError, LLMRequest, LLMResponse

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


def seed_index(directory: Path, solutions: Path = SOLUTIONS) -> dict[str, list[Path]]:
    """Which problem each transcript answers, from the provenance (seed_id) stored beside the seed solutions."""
    index: dict[str, list[Path]] = {}
    for meta_path in sorted(solutions.glob("*/*.json")):
        meta = json.loads(meta_path.read_text())
        transcript = directory / f"{meta.get('seed_id')}.txt"
        if meta.get("origin") == "seed" and transcript.is_file():
            index.setdefault(meta_path.parent.name, []).append(transcript)
    return index


def load_index(directory: Path, solutions: Path = SOLUTIONS) -> dict[str, list[Path]]:
    """index.json ({problem: [file, ...]}) when the directory has one, else the seeds' provenance."""
    manifest = directory / "index.json"
    if manifest.is_file():
        return {p: [directory / f for f in files] for p, files in json.loads(manifest.read_text()).items()}
    return seed_index(directory, solutions)


class ReplayProvider:
    """Sample i of a problem's first turn gets its i-th recording; there are no recorded refinements."""

    name = "replay"

    def __init__(self, directory: Path, model: str = "replay", solutions: Path = SOLUTIONS) -> None:
        self.directory = Path(directory)
        self.endpoint = str(self.directory.resolve())
        self.model = model
        self.index = load_index(self.directory, solutions)
        if not self.index:
            raise LLMError(f"no recordings found in {self.directory} (no index.json, no seed provenance in {solutions})")

    def body(self, request: LLMRequest) -> dict[str, str]:
        """What picks a recording, beside the draw: the messages do not."""
        return {"model": self.model, "problem": request.problem}

    def complete(self, request: LLMRequest) -> LLMResponse:
        files = self.index.get(request.problem, [])
        if request.turn > 0 or request.sample >= len(files):
            raise LLMError(f"replay has no recording for {request.problem} turn {request.turn} sample {request.sample} "
                           f"({len(files)} recorded first answers in {self.directory})")
        return LLMResponse(text=files[request.sample].read_bytes().decode(), model=self.model)
