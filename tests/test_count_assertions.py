"""tools/count_assertions.py counts each kind of assertion where it is written."""

import textwrap

from tools import count_assertions

SNIPPET = textwrap.dedent(
    """
    import numpy as np
    import pytest


    def assert_parity(a, b):  # a helper: its assert counts here ...
        assert a == b, "differ"


    class TestCase:
        def test_method(self):
            self.assertEqual(1, 1)
            self.assertTrue(True)


    @pytest.mark.parametrize("n", [1, 2, 3])  # counted once, not per case
    def test_values(n):
        assert n > 0
        assert_parity(n, n)  # ... and each call again
        np.testing.assert_allclose([n], [n])
        np.testing.assert_array_equal([n], [n])
        with pytest.raises(ValueError, match="bad"):
            int("bad")
        pytest.raises(TypeError, len, 1)
        with pytest.warns(UserWarning):
            pass
        if n > 3:
            pytest.fail("never")
        assertion_count = n  # a name, not a call: not counted
        pytest.approx(n)  # no check on its own
        print(assertion_count)
    """
)


def test_a_literal_snippet_is_counted_by_kind():
    counts = count_assertions.count_source(SNIPPET)
    assert dict(counts) == {"assert": 2, "assert_call": 5, "raises": 3, "fail": 1}


def test_nested_asserts_and_lambdas_are_found():
    source = "def f():\n    def g():\n        assert 1\n    h = lambda: np.testing.assert_equal(1, 1)\n    assert 2\n"
    assert dict(count_assertions.count_source(source)) == {"assert": 2, "assert_call": 1, "raises": 0, "fail": 0}


def test_totals_and_the_files_that_changed():
    before = count_assertions.count_files(
        {"a.py": "assert 1\nassert 2\n", "b.py": "assert 1\n", "gone.py": "assert 0\n"}
    )
    after = count_assertions.count_files({"a.py": "assert 1\n", "b.py": "assert 1\n", "new.py": "pytest.fail('x')\n"})
    assert sum(count_assertions.total(before).values()) == 4
    assert dict(count_assertions.total(after)) == {"assert": 2, "assert_call": 0, "raises": 0, "fail": 1}
    assert count_assertions.changes(before, after) == [("a.py", 2, 1), ("gone.py", 1, 0), ("new.py", 0, 1)]


def test_the_working_tree_is_counted(capsys):
    assert count_assertions.main([]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("working tree: ") and " assertions (" in line, line
    # This file's own asserts are among them.
    assert int(line.split()[2]) > 10, line
