"""RFC 6902 JSON Patch by diffing two JSON documents. Pure, no I/O.

A small, fast diff for the webhook's hot path (`jsonpatch.make_patch` copies both documents and
re-serialises values, which was half the cost of an admission). Objects are diffed key by key;
a list that only grew gets `add .../-` operations (how appended scheduling terms look); any
other list change, or a change of type, replaces the value. JSON types are compared strictly:
`1`, `1.0` and `true` differ.
"""

from __future__ import annotations

from typing import Any


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _same(old: Any, new: Any) -> bool:
    if type(old) is not type(new):
        return False
    if isinstance(old, dict):
        return old.keys() == new.keys() and all(_same(old[k], new[k]) for k in old)
    if isinstance(old, list):
        return len(old) == len(new) and all(_same(a, b) for a, b in zip(old, new, strict=True))
    return old == new


def json_diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """Operations that turn `old` into `new`."""
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[dict[str, Any]] = [{"op": "remove", "path": f"{path}/{_escape(k)}"} for k in old if k not in new]
        for key, value in new.items():
            child = f"{path}/{_escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                ops.extend(json_diff(old[key], value, child))
        return ops
    if isinstance(old, list) and isinstance(new, list) and len(new) >= len(old) \
            and all(_same(a, b) for a, b in zip(old, new[: len(old)], strict=True)):
        return [{"op": "add", "path": f"{path}/-", "value": value} for value in new[len(old):]]
    if _same(old, new):
        return []
    return [{"op": "replace", "path": path, "value": new}]
