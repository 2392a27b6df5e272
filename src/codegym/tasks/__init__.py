"""Tasks and datasets: what a model is asked to solve, and how it is judged."""

from codegym.tasks.humaneval import DatasetError, load_humaneval
from codegym.tasks.outcomes import ALL_OUTCOMES, INFRA_OUTCOMES, MODEL_OUTCOMES, is_infra
from codegym.tasks.scoring import DEFAULT_LIMITS, HARNESS_VERSION, Score, outcome_of, score
from codegym.tasks.task import Compare, IOCase, Task

__all__ = [
    "ALL_OUTCOMES",
    "DEFAULT_LIMITS",
    "HARNESS_VERSION",
    "INFRA_OUTCOMES",
    "MODEL_OUTCOMES",
    "Compare",
    "DatasetError",
    "IOCase",
    "Score",
    "Task",
    "is_infra",
    "load_humaneval",
    "outcome_of",
    "score",
]
