"""kforge's results database: problems, solutions, evaluations and LLM generations.

Stores plain values handed over by callers; knows nothing of the evaluator or the pipeline.
"""

from db.database import ORIGINS, Database
from db.engine import ConflictError, DatabaseError, NotFoundError, default_url
from db.rows import ArchiveRow, EvaluationRow, GenerationRow, LeaderRow, ProblemRow, RunRow, SolutionRow, SpendRow

__all__ = [
    "ORIGINS",
    "ArchiveRow",
    "ConflictError",
    "Database",
    "DatabaseError",
    "EvaluationRow",
    "GenerationRow",
    "LeaderRow",
    "NotFoundError",
    "ProblemRow",
    "RunRow",
    "SolutionRow",
    "SpendRow",
    "default_url",
]
