"""EvalPlus's HumanEval+ and MBPP+ files, judged as evalplus judges them.

A record (``task_id``, ``prompt``, ``entry_point``, ``canonical_solution``, ``base_input``,
``plus_input``, ``atol``) becomes a task of two named parts, ``base`` and ``plus``: each
runs the program once and calls its entry point on every input of its set, compared with
the reference's output on the same input (``_evalplus_judge`` has the rules: per-input
time budgets from the reference's own time, the tolerance, the special oracles). The
sample passes (evalplus's "plus" score) when both parts do; ``Score.parts`` and the
results' ``parts`` field give each, so the base score is there too.

The checking code runs in the sandbox's judge, which the program cannot reach; evalplus
runs it in the program's own process. The documented differences from evalplus 0.3.1 are
in docs/evalplus.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

from codegym.sandbox import Limits
from codegym.tasks.task import Task
from codegym.tasks.taskset import RecordError

FIELDS: Final = ("task_id", "prompt", "entry_point", "canonical_solution", "base_input",
                 "plus_input", "atol")  # fmt: skip
"""What an EvalPlus record has (``contract`` and ``test`` may be there too; unused)."""

LIMITS: Final = Limits(cpu_s=64.0, wall_s=120.0, memory_mb=4096, output_bytes=1 << 20)
"""The run's own limits (4 GiB of memory, as evalplus allows): a net under the part's
budgets (at most 62 s, which the judge keeps), with room for computing expected outputs
the first time a worker sees a task."""

# MBPP+ inputs JSON cannot hold: the rule that rebuilds them, by task number (evalplus's
# ``mbpp_deserialize_inputs``)
_REBUILD: Final[dict[str, tuple[int, ...]]] = {
    "args_tuple": (2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579,
                   596, 616, 630, 726, 740, 744, 809),
    "args_tuples": (63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780),
    "first_tuples": (75, 413, 444, 753),
    "second_tuple": (106, 750),
    "first_sets": (115,),
    "float_complex": (124,),
    "first_tuple": (250, 405, 446, 617, 720, 763, 808),
    "args_tuple_of_tuples": (259, 401, 445),
    "first_mixed_tuple": (278,),
    "first_tuple_rest": (307,),
    "dict_of_tuples": (722,),
    "complex": (252,),
    "deep_tuple": (580, 615, 791),
}  # fmt: skip
_RULE_OF: Final = {n: rule for rule, numbers in _REBUILD.items() for n in numbers}

# special oracles, by entry point (evalplus's ``_special_oracle`` and ``unsafe_execute``)
_MBPP_ORACLES: Final = {
    "are_equivalent": "any",
    "sum_div": "sum_div",
    "surface_Area": "surface_area",
    "digit_distance_nums": "digit_distance",
    **dict.fromkeys(
        ("similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly",
         "larg_nnum", "intersection_array", "find_dissimilar", "Diff"),
        "set_eq",
    ),
    **dict.fromkeys(("check_str", "text_match_three", "text_starta_endb"), "not_none"),
}  # fmt: skip
_HUMANEVAL_ORACLES: Final = {"find_zero": "poly_root"}


def _harness() -> str:
    return resources.files("codegym.tasks").joinpath("_evalplus_judge.py").read_text()


HARNESS: Final = _harness()


def is_evalplus(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` has EvalPlus's distinctive fields."""
    return {"base_input", "plus_input", "canonical_solution", "entry_point"} <= row.keys()


def to_task(row: Mapping[str, Any], fallback_id: str) -> Task:
    """The two-part task of an EvalPlus record.

    Raises:
        RecordError: a field is missing or of the wrong type (named, with the fix).
    """
    missing = [f for f in FIELDS if f not in row]
    if missing:
        raise RecordError(f"an EvalPlus record needs {', '.join(missing)}")
    for name in ("task_id", "prompt", "entry_point", "canonical_solution"):
        if not isinstance(row[name], str) or (name != "prompt" and not row[name]):
            raise RecordError(f"field {name!r} must be a non-empty string")
    task_id, entry = row["task_id"], row["entry_point"]
    if not entry.isidentifier() or entry.startswith("__"):
        raise RecordError(f"field 'entry_point' must name a function, not {entry!r}")
    inputs = {}
    for name in ("base_input", "plus_input"):
        rows = row[name]
        if rows == {}:  # MBPP+ 793 has no plus inputs, written as an empty object
            rows = []
        inputs[name] = rows
        if not isinstance(rows, list) or not all(isinstance(r, (list, dict)) for r in rows):
            raise RecordError(f"field {name!r} must be a list of argument lists")
    atol = row["atol"]
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or atol < 0:
        raise RecordError("field 'atol' must be a number >= 0 (0: exact outputs)")
    dataset, _, number = task_id.partition("/")
    oracles = {"HumanEval": _HUMANEVAL_ORACLES, "Mbpp": _MBPP_ORACLES}.get(dataset, {})
    rule = _RULE_OF.get(int(number), "") if dataset == "Mbpp" and number.isdigit() else ""
    reference = row["prompt"] + row["canonical_solution"]
    parts = []
    for part in ("base", "plus"):
        spec = {
            "part": part,
            "entry": entry,
            "reference": reference,
            "inputs": json.dumps(inputs[f"{part}_input"]),
            "rebuild": rule,
            "oracle": oracles.get(entry, ""),
            "atol": float(atol) if atol else 0,
        }
        spec["key"] = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        parts.append((part, f"__evalplus__(__judge__, {spec!r})\n"))
    return Task(
        id=task_id,
        prompt=row["prompt"],
        entry_point=entry,
        parts=tuple(parts),
        harness=HARNESS,
        reference=row["canonical_solution"],
        cluster=task_id,
        limits=LIMITS,
        metadata={"format": "evalplus"},
    )
