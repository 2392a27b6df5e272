"""Tasks and datasets: what a model is asked to solve, and how it is judged."""

from codegym.tasks.humaneval import DatasetError, load_humaneval
from codegym.tasks.scoring import DEFAULT_LIMITS, Score, outcome_of, score
from codegym.tasks.task import Task

__all__ = [
    "DEFAULT_LIMITS",
    "DatasetError",
    "Score",
    "Task",
    "load_humaneval",
    "outcome_of",
    "score",
]
