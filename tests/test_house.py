"""The house: every library module small enough to read, and an import graph
that only runs down.

(a) No module under keras_attention/ is over 400 lines.
(b) The import graph of keras_attention, read from the source with `ast`, has
    no cycle between modules and no module importing the `__init__` of one of
    its own ancestor packages (an import "running back up": the ancestor is
    still being imported when the module runs, so its names may not exist
    yet). Imports at module level and inside functions are told apart in the
    messages; both count, since a function-level import only postpones the
    cycle to the first call.

Edges: `import a.b.c` and `from a.b import c` (c a module) point at `a.b.c`;
`from a.b import name` (name not a module) at `a.b`. Importing `a.b.c` also
runs the `__init__` of `a.b` and of `a`, unless the importer is inside them
(its own ancestors are being imported already), so those are edges too.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "keras_attention"
MAX_LINES = 400


def modules():
    """{dotted name: path} of every module under keras_attention/ (a package as its `__init__`)."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def ancestors(name):
    """The packages above `name`, nearest first: a.b.c -> a.b, a."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def is_package(name, known):
    return known[name].name == "__init__.py"


def _function_level(tree):
    """The import nodes inside a function (their import runs at the first call)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inside.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom))
    return inside


def imports(name, known):
    """[(target module, line, 'module level' | 'function level', statement)] of `name`'s own imports."""
    path = known[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    deferred = _function_level(tree)
    here = name if is_package(name, known) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = []
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.append(submodule if submodule in known else source)
        else:
            continue
        level = "function level" if id(node) in deferred else "module level"
        statement = ast.get_source_segment(path.read_text(encoding="utf-8"), node).splitlines()[0]
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                found.append((target, node.lineno, level, statement))
    return found


def graph():
    """{module: {target: (line, level, statement)}}: explicit imports plus the
    `__init__` of each package above a target that is not above the importer."""
    known = modules()
    edges = {name: {} for name in known}
    for name in known:
        own = set(ancestors(name))
        for target, line, level, statement in imports(name, known):
            for reached in [target, *ancestors(target)]:
                if reached in known and reached != name and (reached not in own or reached == target):
                    edges[name].setdefault(reached, (line, level, statement))
    return edges


def cycles(edges):
    """One shortest cycle through each module that is on one, as module chains (deduplicated)."""
    found = {}
    for start in edges:
        # Breadth-first from start back to start: the shortest way round.
        previous, frontier = {}, [start]
        while frontier and start not in previous:
            following = []
            for node in frontier:
                for target in edges[node]:
                    if target not in previous:
                        previous[target] = node
                        following.append(target)
            frontier = following
        if start in previous:
            chain, node = [start], previous[start]
            while node != start:
                chain.append(node)
                node = previous[node]
            chain.reverse()
            at = chain.index(min(chain))  # one rotation per cycle
            chain = chain[at:] + chain[:at]
            found[tuple(chain)] = chain
    return list(found.values())


def describe(chain, edges):
    steps = []
    for source, target in zip(chain, chain[1:] + chain[:1]):
        line, level, statement = edges[source][target]
        steps.append(f"  {source} -> {target}   ({source}:{line}, {level}: {statement})")
    return "\n".join(steps)


def back_up_imports(edges):
    """[(module, ancestor, line, level, statement)]: explicit imports of an own ancestor's `__init__`."""
    return [
        (name, target, *where)
        for name, targets in edges.items()
        for target, where in targets.items()
        if target in ancestors(name)
    ]


def test_no_library_module_is_over_400_lines():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}
    over = {name: size for name, size in sizes.items() if size > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split along a seam): {over}"


def test_the_import_graph_has_no_cycle():
    edges = graph()
    found = cycles(edges)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n\n".join(describe(chain, edges) for chain in found)


def test_no_module_imports_its_own_ancestor_package():
    found = back_up_imports(graph())
    assert not found, "imports running back up to an ancestor's __init__:\n" + "\n".join(
        f"  {name} -> {ancestor}   ({name}:{line}, {level}: {statement})"
        for name, ancestor, line, level, statement in found
    )


def test_the_graph_reader_finds_what_it_is_shown(tmp_path, monkeypatch):
    """The reader on a made-up package: a cycle through a function-level
    import, one running back up, and the implied `__init__` edges."""
    package = tmp_path / PACKAGE
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("from keras_attention import a\n")
    (package / "a.py").write_text("def f():\n    from keras_attention.inner import b\n")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "b.py").write_text("from .. import a\nfrom keras_attention import inner\n")
    (package / "inner" / "c.py").write_text("import keras_attention.inner.b\nfrom keras_attention import a as _a\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    edges = graph()
    assert edges["keras_attention"] == {"keras_attention.a": (1, "module level", "from keras_attention import a")}
    assert set(edges["keras_attention.a"]) == {"keras_attention.inner.b", "keras_attention.inner"}
    assert edges["keras_attention.a"]["keras_attention.inner.b"][1] == "function level"
    assert set(edges["keras_attention.inner.b"]) == {"keras_attention.a", "keras_attention.inner"}
    assert set(edges["keras_attention.inner.c"]) == {"keras_attention.inner.b", "keras_attention.a"}
    assert cycles(edges) == [["keras_attention.a", "keras_attention.inner.b"]]
    assert [(m, t) for m, t, *_ in back_up_imports(edges)] == [("keras_attention.inner.b", "keras_attention.inner")]
