"""Unit tests for ipy_resume.runtime.analysis: inputs, outputs, deletions and normalisation."""

from __future__ import annotations

import doctest
from textwrap import dedent

import pytest

from ipy_resume.runtime import analysis, scopes
from ipy_resume.runtime.analysis import AnalysisError, CellAnalysis, analyze, normalize_source


def inputs(source: str) -> set[str]:
    return set(analyze(dedent(source)).inputs)


def outputs(source: str) -> set[str]:
    return set(analyze(dedent(source)).outputs)


def deleted(source: str) -> set[str]:
    return set(analyze(dedent(source)).deleted)


# --------------------------------------------------------------------- API shape


def test_result_is_frozen_dataclass_of_frozensets() -> None:
    result = analyze("y = x")
    assert isinstance(result, CellAnalysis)
    assert isinstance(result.inputs, frozenset)
    assert isinstance(result.outputs, frozenset)
    assert isinstance(result.deleted, frozenset)
    with pytest.raises(AttributeError):
        result.inputs = frozenset()  # type: ignore[misc]


def test_docstring_examples_hold() -> None:
    failures, tried = doctest.testmod(analysis)
    assert tried >= 5
    assert failures == 0
    failures, tried = doctest.testmod(scopes)
    assert tried >= 7
    assert failures == 0


def test_analysis_error_is_value_error() -> None:
    assert issubclass(AnalysisError, ValueError)


# ------------------------------------------------------------- basic data flow


def test_simple_read_and_write() -> None:
    result = analyze("y = x + 1")
    assert result.inputs == {"x"}
    assert result.outputs == {"y"}
    assert result.deleted == frozenset()


def test_read_before_assign_is_input() -> None:
    assert inputs("print(x)\nx = 1") == {"x"}


def test_assign_then_read_is_not_input() -> None:
    assert inputs("x = 1\nprint(x)") == set()


def test_self_referencing_assignment_reads_first() -> None:
    assert inputs("x = x + 1") == {"x"}
    assert outputs("x = x + 1") == {"x"}


def test_augmented_assignment_reads_target() -> None:
    assert inputs("total += 1") == {"total"}
    assert outputs("total += 1") == {"total"}


def test_augmented_assignment_in_loop() -> None:
    src = "for i in range(3):\n    total += i"
    assert inputs(src) == {"total"}
    assert outputs(src) == {"i", "total"}


def test_augmented_assignment_after_binding_is_not_input() -> None:
    assert inputs("total = 0\ntotal += 5") == set()


def test_chained_assignment_binds_every_target() -> None:
    assert outputs("a = b = c") == {"a", "b"}
    assert inputs("a = b = c") == {"c"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a, b = pair", {"a", "b"}),
        ("[a, b] = pair", {"a", "b"}),
        ("a, *rest = seq", {"a", "rest"}),
        ("(a, (b, *c)), d = nested", {"a", "b", "c", "d"}),
    ],
)
def test_unpacking_binds_all_names(source: str, expected: set[str]) -> None:
    assert outputs(source) == expected
    assert inputs(source) == {source.rsplit("= ", 1)[1]}


def test_swap_reads_both_names() -> None:
    assert inputs("a, b = b, a") == {"a", "b"}


def test_attribute_read_reads_object() -> None:
    assert inputs("y = obj.attr.deep") == {"obj"}


def test_attribute_and_subscript_assignment_read_but_do_not_bind() -> None:
    src = "d[k] = v\nobj.attr = w"
    assert inputs(src) == {"d", "k", "v", "obj", "w"}
    assert outputs(src) == set()


def test_subscript_augmented_assignment_reads_container() -> None:
    assert inputs("counts[key] += 1") == {"counts", "key"}
    assert outputs("counts[key] += 1") == set()


def test_mutation_of_name_bound_in_cell_is_not_input() -> None:
    assert inputs("d = {}\nd['a'] = 1") == set()


# ------------------------------------------------------------ excluded names


def test_builtins_are_never_inputs() -> None:
    assert inputs("print(len(range(3)), sorted([]), Exception)") == set()


def test_rebound_builtin_is_output_not_input() -> None:
    result = analyze("list = [1]\nprint(list)")
    assert result.outputs == {"list"}
    assert result.inputs == frozenset()


@pytest.mark.parametrize(
    "name",
    [
        "_",
        "__",
        "___",
        "_7",
        "_123",
        "_i",
        "_ii",
        "_iii",
        "_i4",
        "_oh",
        "_ih",
        "In",
        "Out",
        "get_ipython",
        "exit",
        "quit",
        "__name__",
        "__builtins__",
        "__file__",
        "__doc__",
    ],
)
def test_ipython_history_names_are_not_inputs(name: str) -> None:
    assert inputs(f"y = {name}") == set()


@pytest.mark.parametrize("name", ["_x", "_i_", "In2", "_1a", "i1"])
def test_names_resembling_history_names_are_inputs(name: str) -> None:
    assert inputs(f"y = {name}") == {name}


# ---------------------------------------------------- comprehensions, lambdas


@pytest.mark.parametrize(
    "source",
    [
        "r = [x * k for x in data if x > lo]",
        "r = {x * k for x in data if x > lo}",
        "r = {x: k for x in data if x > lo}",
        "r = sum(x * k for x in data if x > lo)",
    ],
)
def test_comprehension_variables_are_local(source: str) -> None:
    result = analyze(source)
    assert result.inputs == {"data", "k", "lo"}
    assert result.outputs == {"r"}


def test_nested_comprehension_inner_iterable_may_use_outer_variable() -> None:
    src = "flat = [c for row in grid for c in row if c != skip]"
    assert inputs(src) == {"grid", "skip"}
    assert outputs(src) == {"flat"}


def test_comprehension_inside_comprehension() -> None:
    src = "m = [[i * j for j in cols] for i in rows]"
    assert inputs(src) == {"cols", "rows"}


def test_first_iterable_evaluated_outside_comprehension() -> None:
    # The outer ``x`` in ``in x`` is the global, the element ``x`` is the loop variable.
    assert inputs("y = [x for x in x]") == {"x"}


def test_comprehension_variable_does_not_leak() -> None:
    assert inputs("a = [i for i in r]\nb = i") == {"r", "i"}
    assert outputs("a = [i for i in r]") == {"a"}


def test_lambda_parameters_are_local_and_free_names_are_inputs() -> None:
    result = analyze("f = lambda a, b=dflt: a + b + offset")
    assert result.inputs == {"dflt", "offset"}
    assert result.outputs == {"f"}


def test_lambda_reading_name_bound_earlier_is_not_input() -> None:
    assert inputs("offset = 1\nf = lambda a: a + offset") == set()


# ----------------------------------------------------------------- f-strings


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("s = f'{x}'", {"x"}),
        ("s = f'{x!r} and {y.attr}'", {"x", "y"}),
        ("s = f'{x:{width}}'", {"x", "width"}),
        ("s = f'{x:{width}.{prec}f}'", {"x", "width", "prec"}),
        ("s = f'plain text'", set()),
    ],
)
def test_fstring_reads(source: str, expected: set[str]) -> None:
    assert inputs(source) == expected


# ------------------------------------------------------- functions, classes


def test_default_arguments_are_read_at_definition() -> None:
    src = "def f(a=d1, *args, b=d2, **kw):\n    return a"
    assert inputs(src) == {"d1", "d2"}
    assert outputs(src) == {"f"}


def test_decorators_are_read() -> None:
    src = "@cache\n@register(name=label)\ndef f():\n    pass"
    assert inputs(src) == {"cache", "register", "label"}


def test_annotations_are_read() -> None:
    src = "def f(a: TA, *, b: TB = 1) -> TR:\n    return a"
    assert inputs(src) == {"TA", "TB", "TR"}


def test_class_bases_keywords_and_decorators_are_read() -> None:
    src = "@dataclass\nclass C(Base, Mixin, metaclass=Meta):\n    pass"
    assert inputs(src) == {"dataclass", "Base", "Mixin", "Meta"}
    assert outputs(src) == {"C"}


def test_function_body_reading_global_is_input() -> None:
    src = "def f(n):\n    return n * scale"
    assert inputs(src) == {"scale"}


def test_function_body_reading_name_defined_earlier_is_not_input() -> None:
    src = "scale = 2\ndef f(n):\n    return n * scale"
    assert inputs(src) == set()


def test_function_body_reading_name_defined_later_is_input() -> None:
    src = "def f(n):\n    return helper(n)\ndef helper(n):\n    return n"
    assert inputs(src) == {"helper"}


def test_function_locals_are_not_inputs() -> None:
    src = """
    def f(a, *args, **kwargs):
        b = a + 1
        for c in args:
            b += c
        import os
        try:
            pass
        except Exception as err:
            b = err
        with ctx() as w:
            pass
        return b, os, w, kwargs
    """
    assert inputs(src) == {"ctx"}
    assert outputs(src) == {"f"}


def test_recursive_function_is_not_its_own_input() -> None:
    src = "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)"
    assert inputs(src) == set()


def test_decorator_reading_own_name_is_input() -> None:
    assert inputs("@f\ndef f():\n    pass") == {"f"}


def test_closure_variables_resolve_to_enclosing_function() -> None:
    src = """
    def outer():
        x = 1
        def inner():
            return x + y
        return inner
    """
    assert inputs(src) == {"y"}


def test_nonlocal_name_is_not_global() -> None:
    src = """
    def outer():
        count = 0
        def bump():
            nonlocal count
            count += 1
        return bump
    """
    assert inputs(src) == set()
    assert outputs(src) == {"outer"}


def test_class_body_reads_and_methods() -> None:
    src = """
    class A:
        size = default_size
        doubled = size * 2
        def m(self):
            return A(self.size), helper
    """
    assert inputs(src) == {"default_size", "helper"}
    assert outputs(src) == {"A"}


def test_class_scope_is_invisible_to_methods_and_comprehensions() -> None:
    src = """
    class A:
        k = 1
        def m(self):
            return k
        ks = [k for _ in range(3)]
    """
    assert inputs(src) == {"k"}


def test_class_body_assignments_are_not_module_outputs() -> None:
    assert outputs("class A:\n    x = 1\n    def m(self):\n        pass") == {"A"}


# ------------------------------------------------------------ global statement


def test_global_statement_write_is_output() -> None:
    src = "def f():\n    global counter\n    counter = 0"
    assert outputs(src) == {"f", "counter"}
    assert inputs(src) == set()


def test_global_statement_read_is_input() -> None:
    src = "def f():\n    global counter\n    counter += 1"
    assert inputs(src) == {"counter"}
    assert outputs(src) == {"f", "counter"}


def test_global_read_of_name_bound_earlier_is_not_input() -> None:
    src = "counter = 0\ndef f():\n    global counter\n    counter += 1"
    assert inputs(src) == set()


def test_global_in_nested_function() -> None:
    src = """
    def outer():
        def inner():
            global state
            state = 1
        return inner
    """
    assert outputs(src) == {"outer", "state"}


def test_global_write_keeps_name_out_of_deleted() -> None:
    # The function may run after the ``del``, so the final state is unknown.
    src = "del g\ndef f():\n    global g\n    g = 1\nf()"
    assert outputs(src) == {"f", "g"}
    assert deleted(src) == {"g"}


# --------------------------------------------------------------------- walrus


def test_walrus_at_top_level_binds() -> None:
    src = "if (n := compute()) > 0:\n    print(n)\nm = n"
    result = analyze(dedent(src))
    assert result.inputs == {"compute"}
    assert result.outputs == {"n", "m"}


def test_walrus_in_comprehension_binds_module_name() -> None:
    src = "vals = [(last := v) for v in data]\nprint(last)"
    result = analyze(src)
    assert result.outputs == {"vals", "last"}
    assert result.inputs == {"data"}


def test_walrus_in_comprehension_inside_function_is_local() -> None:
    src = "def f(d):\n    [(last := v) for v in d]\n    return last"
    assert outputs(src) == {"f"}
    assert inputs(src) == set()


def test_walrus_behind_short_circuit_is_maybe_bound() -> None:
    src = "ok = flag or (fallback := 0)\nprint(fallback)"
    assert inputs(src) == {"flag", "fallback"}
    assert outputs(src) == {"ok", "fallback"}


# -------------------------------------------------------------------- imports


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os", {"os"}),
        ("import os.path", {"os"}),
        ("import a.b.c", {"a"}),
        ("import numpy as np", {"np"}),
        ("import a.b as c", {"c"}),
        ("from m import x", {"x"}),
        ("from m import x as y", {"y"}),
        ("from m import (x, y as z)", {"x", "z"}),
        ("from . import sibling", {"sibling"}),
        ("from m import *", set()),
    ],
)
def test_import_bindings(source: str, expected: set[str]) -> None:
    result = analyze(source)
    assert result.outputs == expected
    assert result.inputs == frozenset()


def test_import_then_use_is_not_input() -> None:
    assert inputs("import numpy as np\na = np.zeros(3)") == set()


# --------------------------------------------------- for / with / except / match


def test_for_target_is_output() -> None:
    src = "for a, (b, *c) in items:\n    pass"
    assert outputs(src) == {"a", "b", "c"}
    assert inputs(src) == {"items"}


def test_with_target_is_output_and_body_is_sequential() -> None:
    src = "with open(path) as fh:\n    data = fh.read()\nsize = len(data)"
    assert outputs(src) == {"fh", "data", "size"}
    assert inputs(src) == {"path"}


def test_multiple_with_items() -> None:
    src = "with a() as x, b(x) as (y, z):\n    pass"
    assert outputs(src) == {"x", "y", "z"}
    assert inputs(src) == {"a", "b"}


def test_except_name_is_no_output_and_may_be_left_deleted() -> None:
    src = "try:\n    risky()\nexcept ValueError as err:\n    msg = str(err)"
    result = analyze(src)
    assert result.outputs == {"msg"}
    # the handler ends with an implicit ``del err``: an ``err`` bound before the cell
    # is gone after it whenever the handler ran
    assert result.deleted == {"err"}
    assert result.inputs == {"risky"}
    assert analyze(src + "\nerr = None").deleted == frozenset()  # bound again after it


def test_except_name_read_after_handler_is_input() -> None:
    src = "try:\n    pass\nexcept E as err:\n    pass\nprint(err)"
    assert inputs(src) == {"E", "err"}


def test_try_body_binding_is_maybe_in_handler() -> None:
    src = "try:\n    x = load()\nexcept OSError:\n    print(x)"
    assert inputs(src) == {"load", "x"}


def test_try_else_and_finally_bindings() -> None:
    src = (
        "try:\n    a = 1\nexcept E:\n    a = 2\nelse:\n    b = a\nfinally:\n    c = 3\nprint(a, c)"
    )
    result = analyze(src)
    assert result.outputs == {"a", "b", "c"}
    assert result.inputs == {"E"}


def test_match_captures_and_class_patterns() -> None:
    src = """
    match command:
        case Point(x=0, y=py):
            pass
        case [first, *rest]:
            pass
        case {"key": value, **others}:
            pass
        case Color.RED | Color.GREEN as colour:
            pass
        case _:
            pass
    """
    result = analyze(dedent(src))
    assert result.outputs == {"py", "first", "rest", "value", "others", "colour"}
    assert result.inputs == {"command", "Point", "Color"}


def test_match_capture_used_in_guard_and_body_is_not_input() -> None:
    src = "match v:\n    case [n] if n > limit:\n        out = n"
    assert inputs(src) == {"v", "limit"}
    assert outputs(src) == {"n", "out"}


def test_match_binding_in_one_case_is_maybe_bound() -> None:
    src = "match v:\n    case 1:\n        x = 1\n    case _:\n        pass\nprint(x)"
    assert inputs(src) == {"v", "x"}


def test_match_binding_in_every_case_with_wildcard_is_definite() -> None:
    src = "match v:\n    case 1:\n        x = 1\n    case _:\n        x = 2\nprint(x)"
    assert inputs(src) == {"v"}


# ---------------------------------------------------------------------- async


def test_top_level_async_forms() -> None:
    src = """
    async with session() as s:
        pass
    async for item in stream:
        got = await fetch(item)
    result = await gather(s)
    """
    res = analyze(dedent(src))
    assert res.outputs == {"s", "item", "got", "result"}
    assert res.inputs == {"session", "stream", "fetch", "gather"}


def test_async_function_body_reads_globals() -> None:
    src = "async def go():\n    return await client.get(url)"
    assert inputs(src) == {"client", "url"}
    assert outputs(src) == {"go"}


# ------------------------------------------------------------------ annotations


def test_annotated_assignment_binds_bare_annotation_does_not() -> None:
    result = analyze("x: int = 3\ny: Custom")
    assert result.outputs == {"x"}
    assert result.inputs == {"Custom"}


def test_annotated_attribute_assignment_does_not_bind() -> None:
    assert outputs("obj.a: int = 1") == set()
    assert inputs("obj.a: int = 1") == {"obj"}


# ------------------------------------------------------------------------ del


def test_del_of_unbound_name_is_input_and_deleted() -> None:
    result = analyze("del x")
    assert result.inputs == {"x"}
    assert result.deleted == {"x"}
    assert result.outputs == frozenset()


def test_bind_then_del_is_only_deleted() -> None:
    result = analyze("tmp = compute()\ndel tmp")
    assert result.deleted == {"tmp"}
    assert result.outputs == frozenset()
    assert result.inputs == {"compute"}


def test_del_then_rebind_is_only_output() -> None:
    result = analyze("del x\nx = 1")
    assert result.outputs == {"x"}
    assert result.deleted == frozenset()
    assert result.inputs == {"x"}


def test_read_before_del_is_input() -> None:
    assert inputs("print(x)\ndel x") == {"x"}


def test_del_of_tuple_and_attribute() -> None:
    result = analyze("a = b = 1\ndel a, b\ndel obj.attr, d[k]")
    assert result.deleted == {"a", "b"}
    assert result.inputs == {"obj", "d", "k"}


def test_conditional_del_is_both_output_and_deleted() -> None:
    result = analyze("x = 1\nif flag:\n    del x")
    assert result.outputs == {"x"}
    assert result.deleted == {"x"}


def test_del_inside_function_is_local() -> None:
    assert deleted("def f():\n    v = 1\n    del v") == set()


# ----------------------------------------------------- conditional conservatism


@pytest.mark.parametrize(
    "source",
    [
        "if c:\n    x = 1\nprint(x)",
        "for i in items:\n    x = i\nprint(x)",
        "while c:\n    x = 1\nprint(x)",
        "try:\n    x = risky()\nexcept Exception:\n    pass\nprint(x)",
        "for i in items:\n    if i:\n        break\n    x = i\nelse:\n    x = 0\nprint(x)",
    ],
)
def test_maybe_assigned_name_is_still_input(source: str) -> None:
    assert "x" in inputs(source)
    assert "x" in outputs(source)


def test_assignment_on_both_branches_is_definite() -> None:
    assert inputs("if c:\n    x = 1\nelse:\n    x = 2\nprint(x)") == {"c"}


def test_read_inside_branch_after_binding_in_same_branch() -> None:
    assert inputs("if c:\n    x = 1\n    print(x)") == {"c"}


def test_function_reading_conditionally_defined_name_is_input() -> None:
    assert inputs("if c:\n    k = 1\ndef f():\n    return k") == {"c", "k"}


# ------------------------------------------------------------------ edge cases


@pytest.mark.parametrize("source", ["", "   \n\n", "# just a comment\n\n# another"])
def test_empty_cell(source: str) -> None:
    result = analyze(source)
    assert result.inputs == result.outputs == result.deleted == frozenset()
    assert result.normalized == normalize_source("")


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("x = (", 1),
        ("a = 1\nb = = 2", 2),
        ("ok = 1\n\nif x\n    pass", 3),
        ("x = 1\nbreak", 2),
        ("def f():\n    pass\n  y = 1", 3),
    ],
)
def test_syntax_error_reports_line(source: str, line: int) -> None:
    with pytest.raises(AnalysisError, match=rf"^line {line}: ") as info:
        analyze(source)
    assert isinstance(info.value.__cause__, SyntaxError)


def test_null_byte_is_analysis_error() -> None:
    with pytest.raises(AnalysisError, match=r"^line 2: "):
        analyze("a = 1\nb = '\0'")


def test_invalid_escape_warning_is_not_an_error() -> None:
    assert inputs("pattern = re.compile('\\d+')") == {"re"}


# --------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("x = 1", "x = 1  # set x"),
        ("x = 1\ny = 2", "x = 1\n\n\n# gap\ny = 2\n"),
        ("x = 1", "x = 1   \n"),
        ("y = a+b*c", "y = a + (b * c)"),
        ("y = f(a,b)", "y = f(\n    a,\n    b,\n)"),
        ("s = 'hi'", 's = "hi"'),
        ("if a:\n  b = 1", "if a:\n        b = 1"),
        ("t = (1, 2)", "t = 1, 2"),
    ],
)
def test_normalized_ignores_formatting(left: str, right: str) -> None:
    assert normalize_source(left) == normalize_source(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("x = 1", "y = 1"),
        ("x = 1", "x = 2"),
        ("x = a + b", "x = a - b"),
        ("x = 'a'", "x = 'b'"),
        ("x = 1", "x = 1.0"),
        ("f(a, b)", "f(b, a)"),
        ("x = 1\ny = 2", "y = 2\nx = 1"),
        ('def f():\n    "doc"', 'def f():\n    "other doc"'),
    ],
)
def test_normalized_detects_code_changes(left: str, right: str) -> None:
    assert normalize_source(left) != normalize_source(right)


def test_normalized_matches_analyze_and_omits_positions() -> None:
    src = "x = 1\n"
    assert normalize_source(src) == analyze(src).normalized
    assert "lineno" not in normalize_source(src)
    assert normalize_source(src).startswith("Module(")


# ------------------------------------------------------- %time and %timeit


def _magic(name: str, line: str) -> str:
    # what IPython's transforms make of ``%name line``
    return f"get_ipython().run_line_magic({name!r}, {line!r})"


def test_time_magic_code_is_analysed_where_it_stands() -> None:
    a = analyze(_magic("time", "x = load(path)"))
    assert (a.inputs, a.outputs) == ({"load", "path"}, {"x"})
    assert analyze("r = " + _magic("time", "f(z)")).inputs == {"f", "z"}
    assert analyze(_magic("time", "--no-raise-error y = g()")).outputs == {"y"}
    # a name the cell bound before the magic is not an input
    assert analyze("n = 3\n" + _magic("time", "m = n * 2")).inputs == frozenset()


def test_timeit_magic_reads_but_binds_only_its_saved_result() -> None:
    a = analyze(_magic("timeit", "-n1 -r 3 np.add.at(counts, i, 1)"))
    assert (a.inputs, a.outputs) == ({"np", "counts", "i"}, frozenset())
    assert analyze(_magic("timeit", "tmp = f(q)")).outputs == frozenset()
    saved = analyze(_magic("timeit", "-o -v res g()"))
    assert (saved.inputs, saved.outputs) == ({"g"}, {"res"})


def test_other_magics_and_unparsable_magic_code_stay_opaque() -> None:
    assert analyze(_magic("time", "!ls")).inputs == frozenset()
    assert analyze(_magic("timeit", "-z f()")).inputs == frozenset()  # IPython refuses it
    assert analyze(_magic("matplotlib", "inline")).inputs == frozenset()
    assert analyze("get_ipython().run_line_magic(kind, 'x = 1')").outputs == frozenset()


@pytest.mark.parametrize(
    ("source", "rebinds", "reads_all", "inputs"),
    [
        ("%xdel b", True, False, set()),
        ("%reset_selective -f ^tmp", True, True, set()),
        ("%matplotlib inline\ny = x", False, False, {"x"}),
        ("%run -i helper.py", True, True, set()),
        ("exec('y = x + 1')", False, False, {"x"}),  # a literal is read as the code it runs
        ("exec(code)", True, True, {"code"}),
        ("globals()['z'] = 1", True, True, set()),
        ("def f():\n    return locals()\ny = f()", False, False, set()),
        ("y = x + 1", False, False, {"x"}),
    ],
)
def test_cells_that_reach_names_the_code_does_not_list_are_flagged(
    source: str, rebinds: bool, reads_all: bool, inputs: set[str]
) -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    a = analyze(TransformerManager().transform_cell(source))
    assert (a.rebinds, a.reads_all) == (rebinds, reads_all)
    assert set(a.inputs) == inputs
