"""irc.pytree: flatten/unflatten round trips, JAX's leaf order, the JSON form, mismatches named."""

import json

import pytest

from irc import pytree


def test_round_trip_and_order():
    tree = {"b": [1, (2, 3)], "a": {"y": 4, "x": None}, "c": 5}
    leaves, td = pytree.flatten(tree)
    assert leaves == [4, 1, 2, 3, 5]  # sorted keys, depth first, None is no leaf
    assert td.unflatten(leaves) == tree
    assert pytree.leaf_paths(td) == ["a.y", "b.0", "b.1.0", "b.1.1", "c"]
    assert pytree.flatten(7)[1].unflatten([8]) == 8
    assert pytree.leaf_paths(pytree.flatten(7)[1]) == ["0"]


def test_json_form_round_trips_and_rejects_junk():
    _, td = pytree.flatten({"w": [1, 2], "t": (3,), "n": None})
    again = pytree.TreeDef.from_json(json.loads(json.dumps(td.to_json())))
    assert again == td and hash(again) == hash(td)
    for junk in [5, {"dict": [1]}, {"set": []}, {"list": [1]}, [], {"a": 1, "b": 2}]:
        with pytest.raises(pytree.TreeMismatch):
            pytree.TreeDef.from_json(junk)
    deep = "*"
    for _ in range(500):
        deep = {"list": [deep]}
    with pytest.raises(pytree.TreeMismatch, match="200 levels"):
        pytree.TreeDef.from_json(deep)


def test_mismatch_is_named():
    _, a = pytree.flatten({"w": [1, 2]})
    _, b = pytree.flatten({"w": [1, 2, 3]})
    with pytest.raises(pytree.TreeMismatch, match=r"params\['w'\]: expected \[\*, \*\], got \[\*, \*, \*\]"):
        pytree.check_same(a, b, "params")
    pytree.check_same(a, a, "params")
    with pytest.raises(pytree.TreeMismatch, match="expected 2 leaves"):
        a.unflatten([1])
    with pytest.raises(pytree.TreeMismatch, match="not a string"):
        pytree.flatten({1: 2})
