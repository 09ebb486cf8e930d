"""tests/schedule.py: the longest-first order of the pytest-xdist scopes and its table."""

import json
import os

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_scopes_group_export_split_heavy_files_and_keep_other_files(schedule):
    assert schedule.scope_of("tests/export/test_export.py::test_a") == "tests/export"
    assert schedule.scope_of("tests/export/sub/test_b.py::C::test_b[x]") == "tests/export"
    heavy = "tests/train/test_replay.py::test_kills[dpsgd-0]"
    assert schedule.scope_of(heavy) == heavy
    assert schedule.scope_of("tests/train/test_base.py::test_x[1]") == "tests/train/test_base.py"


def test_estimate_uses_the_table_then_the_parametrized_function_then_the_default(schedule):
    table = {"t.py::a": 5.0, "t.py::b[1]": 2.0, "t.py::b[2]": 7.0, "t.py::bc": 50.0}
    assert schedule.estimate("t.py::a", table) == 5.0
    assert schedule.estimate("t.py::a[new]", table) == 5.0
    assert schedule.estimate("t.py::b[3]", table) == 7.0  # not t.py::bc's 50
    assert schedule.estimate("t.py::z", table) == schedule.DEFAULT_SECONDS


def test_longest_first_orders_by_total_and_keeps_ties_in_order(schedule):
    table = {"big.py::a": 30.0, "mid.py::a": 4.0, "mid.py::b": 4.0}
    scopes = {"small1.py": ["small1.py::a"], "mid.py": ["mid.py::a", "mid.py::b"],
              "small2.py": ["small2.py::a"], "big.py": ["big.py::a"],
              "many.py": [f"many.py::t{i}" for i in range(10)]}
    # many.py: ten unlisted tests, 10 x DEFAULT_SECONDS = 3 s.
    assert schedule.longest_first(scopes, table) == [
        "big.py", "mid.py", "many.py", "small1.py", "small2.py"]


def test_table_from_a_junit_file_names_tests_by_node_id(schedule, tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_a.py").write_text("")
    xml = tmp_path / "run.xml"
    xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.sub.test_a" name="test_slow[x-1]" time="12.34"/>'
        '<testcase classname="tests.sub.test_a.TestK" name="test_m" time="1.0"/>'
        '<testcase classname="tests.sub.test_a" name="test_fast" time="0.2"/>'
        '</testsuite></testsuites>')
    assert schedule.durations_from_junit(str(xml), str(tmp_path)) == {
        "tests/sub/test_a.py::TestK::test_m": 1.0,
        "tests/sub/test_a.py::test_slow[x-1]": 12.3}
    xml.write_text('<testsuite><testcase classname="tests.gone" name="t" time="3"/></testsuite>')
    with pytest.raises(ValueError, match="tests.gone"):
        schedule.durations_from_junit(str(xml), str(tmp_path))


def test_committed_table_and_split_files_name_files_of_this_suite(schedule):
    with open(schedule.DURATIONS_PATH, encoding="utf-8") as f:
        committed = json.load(f)
    assert os.path.exists(os.path.join(_ROOT, committed["source"])), committed["source"]
    assert committed["seconds"] and all(s >= schedule.MIN_LISTED_SECONDS
                                        for s in committed["seconds"].values())
    for path in schedule.SPLIT_FILES:
        assert os.path.exists(os.path.join(_ROOT, path)), path
        with open(os.path.join(_ROOT, path), encoding="utf-8") as f:
            source = f.read()
        # A session fixture would be built once per worker anyway; a class or package one
        # would be rebuilt each time another file's test runs in between.
        assert 'scope="class"' not in source and 'scope="package"' not in source, path


def test_replay_hands_each_scope_to_the_least_busy_worker(schedule):
    scopes = {"a": ["a::1"], "b": ["b::1", "b::2"], "c": ["c::1"]}
    seconds = {"a::1": 1.0, "b::1": 0.5, "b::2": 0.5, "c::1": 4.0}
    # a -> w0 (1), b -> w1 (1), c -> w0 (5): the long scope last ends the run late.
    assert schedule.replay(["a", "b", "c"], scopes, seconds) == [5.0, 1.0]
    order = schedule.longest_first(scopes, seconds)  # c -> w0 (4), a -> w1, b -> w1 (2)
    assert order == ["c", "a", "b"]
    assert schedule.replay(order, scopes, seconds) == [4.0, 2.0]
    assert schedule.replay(order, scopes, seconds, workers=3) == [4.0, 1.0, 1.0]
