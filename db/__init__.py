"""kforge's results database: problems, solutions, evaluations and LLM generations.

Stores plain values handed over by callers; knows nothing of the evaluator or the pipeline.
"""

from db.database import ORIGINS, Database
from db.engine import ConflictError, DatabaseError, NotFoundError, default_url
from db.rows import EvaluationRow, GenerationRow, LeaderRow, ProblemRow, SolutionRow

__all__ = [
    "ORIGINS",
    "ConflictError",
    "Database",
    "DatabaseError",
    "EvaluationRow",
    "GenerationRow",
    "LeaderRow",
    "NotFoundError",
    "ProblemRow",
    "SolutionRow",
    "default_url",
]
