"""Tasks and datasets: what a model is asked to solve, and how it is judged."""

from codegym.sandbox import Compare
from codegym.tasks.ground_truth import GroundTruthReport, Quarantined, verify
from codegym.tasks.humaneval import load_humaneval
from codegym.tasks.loaders import (
    load_jsonl,
    load_suite,
    register_family,
    register_manifest,
    register_suite,
)
from codegym.tasks.outcomes import ALL_OUTCOMES, INFRA_OUTCOMES, MODEL_OUTCOMES, is_infra
from codegym.tasks.scoring import DEFAULT_LIMITS, HARNESS_VERSION, Score, outcome_of, score
from codegym.tasks.task import IOCase, Task
from codegym.tasks.taskset import DatasetError, TaskSet, UnknownTaskError

__all__ = [
    "ALL_OUTCOMES",
    "DEFAULT_LIMITS",
    "HARNESS_VERSION",
    "INFRA_OUTCOMES",
    "MODEL_OUTCOMES",
    "Compare",
    "DatasetError",
    "GroundTruthReport",
    "IOCase",
    "Quarantined",
    "Score",
    "Task",
    "TaskSet",
    "UnknownTaskError",
    "is_infra",
    "load_humaneval",
    "load_jsonl",
    "load_suite",
    "outcome_of",
    "register_family",
    "register_manifest",
    "register_suite",
    "score",
    "verify",
]
