"""Loaded ONNX files, kept for the next run: `run_onnx`, `translate_texts`
and the serve engines load a file's onnxruntime session and read its
embedding tables once, not on every call.

Creating a session is most of a small request's time (a decoder with its
loop inside: about a second), and a caller serving one request at a time
calls `run_onnx` in a loop. The last few files are kept, each under its
path, inode, size and modification time, so a file exported again in place
is loaded again, never served stale.
"""

import functools
import os

from keras_attention.export.onnx import _session

# Sessions kept: enough for an export's signatures and its int8 copies; a
# large model's session holds its weights, so not more.
KEPT_SESSIONS = 4


def _identity(path):
    """What changes when the file at `path` is written again."""
    status = os.stat(path)
    return (status.st_ino, status.st_size, status.st_mtime_ns)


@functools.lru_cache(maxsize=KEPT_SESSIONS)
def _cached_session(path, identity, threads):
    return _session(path, threads)


@functools.lru_cache(maxsize=4 * KEPT_SESSIONS)
def _cached_rows(path, identity):
    return _embedding_rows(path)


def loaded_session(path, threads=None):
    """An onnxruntime session of the ONNX file at `path` (`threads` intra-op
    threads, None for onnxruntime's default), loaded once while the file is
    unchanged."""
    path = os.path.abspath(path)
    return _cached_session(path, _identity(path), threads)


def embedding_rows(path):
    """{input name: rows of the embedding table its ids are looked up in},
    read once while the file at `path` is unchanged (a copy: the caller may
    change it)."""
    path = os.path.abspath(path)
    return dict(_cached_rows(path, _identity(path)))


# Ops an id passes through on its way to an embedding lookup (Keras's
# Embedding maps negative ids with a compare-and-select first).
_ID_OPS = {
    "Cast",
    "Add",
    "Sub",
    "Mul",
    "Where",
    "Identity",
    "Unsqueeze",
    "Squeeze",
    "Reshape",
    "Less",
    "Greater",
    "Not",
    "Expand",
    "Clip",
}


def _embedding_rows(path):
    """{input name: rows of the embedding table its ids are looked up in}.

    Found by following each input through `_ID_OPS` to a `Gather` whose data
    is a rank-2 weight; inputs that reach none are left out.
    """
    import onnx

    graph = onnx.load(str(path)).graph
    tables = {i.name: int(i.dims[0]) for i in graph.initializer if len(i.dims) == 2}
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    rows = {}
    for value in graph.input:
        seen, frontier, found = {value.name}, [value.name], []
        while frontier:
            name = frontier.pop()
            for node in consumers.get(name, ()):
                if (
                    node.op_type == "Gather"
                    and len(node.input) > 1
                    and node.input[1] == name
                    and node.input[0] in tables
                ):
                    found.append(tables[node.input[0]])
                elif node.op_type in _ID_OPS:
                    for output in node.output:
                        if output not in seen:
                            seen.add(output)
                            frontier.append(output)
        if found:
            rows[value.name] = min(found)
    return rows
