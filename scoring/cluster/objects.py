"""Reading Kubernetes JSON objects that may be malformed: a field of the wrong type reads as empty,
never as an exception. Pure, no I/O."""

from __future__ import annotations

from typing import Any

MAX_GPUS = 1024
"""No node has more; a larger request is garbage and earns no steering."""


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
