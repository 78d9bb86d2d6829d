"""The JSON Patch diff: applying it to the old document always gives the new one."""

import copy

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.diff import json_diff

scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False) | \
    st.text(alphabet="ab~/", max_size=3)
documents = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) |
                         st.dictionaries(st.text(alphabet="ab~/", max_size=3), kids, max_size=3), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(documents, documents)
def test_the_diff_of_any_two_documents_turns_one_into_the_other(old, new):
    assert jsonpatch.apply_patch(copy.deepcopy(old), json_diff(old, new)) == new
    assert json_diff(new, new) == []


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), documents, max_size=4), st.lists(documents, max_size=3))
def test_appended_list_items_become_appends(doc, extra):
    old = {"spec": {"terms": [1, 2], **doc}}
    new = copy.deepcopy(old)
    new["spec"]["terms"] += extra
    assert all(op["op"] == "add" and op["path"] == "/spec/terms/-" for op in json_diff(old, new))
    assert jsonpatch.apply_patch(copy.deepcopy(old), json_diff(old, new)) == new


def test_json_types_are_compared_strictly():
    assert json_diff({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert json_diff({"a": 1}, {"a": 1.0}) == [{"op": "replace", "path": "/a", "value": 1.0}]
    assert json_diff({"a/b": 1}, {"a/b": 2}) == [{"op": "replace", "path": "/a~1b", "value": 2}]
