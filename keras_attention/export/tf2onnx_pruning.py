"""A linear-time replacement for tf2onnx's pruning of unused nodes, used
while our conversions run.

tf2onnx (1.17) prunes the graph after every optimizer pass, in the main
graph and in every loop and branch body. Its `Graph.extract_sub_graph_nodes`
walks the graph back from each output separately and unites the walks, so
a loop body with forty loop-carried values is walked forty times, each walk
re-collecting the implicit inputs of the nested bodies. On a decoder with its
loop inside that was most of the conversion (measured on the sampling
decoder of tests/test_runtime_options_export.py: 37 of 70 s, the optimizer
54 s before, 33 s after). The replacement walks once from all the outputs
together: the same set of nodes (a node is kept when some output reaches
it through nodes the checker accepts, which does not depend on the output
the walk started from), and tests/test_tf2onnx_pruning.py checks that the
converted files are the same.
"""

import contextlib
import threading

_LOCK = threading.Lock()
_ACTIVE = [0]  # conversions running with the replacement installed
_ORIGINAL = []


def _extract_sub_graph_nodes(self, outputs_name, input_checker=None, remove_unused_inputs=True):
    """The nodes of `self` that `outputs_name` depend on (tf2onnx's
    signature and meaning; the result is a list in no particular order,
    as tf2onnx's own)."""
    outputs = list(outputs_name)
    if not remove_unused_inputs:
        # Placeholders stay even when no output reads them (a loop body's inputs).
        outputs += [placeholder.output[0] for placeholder in self.inputs]
    kept, pending = set(), []

    def keep(node):
        if node is None or node in kept or (input_checker is not None and input_checker(node) is False):
            return
        kept.add(node)
        pending.append(node)

    for output in outputs:
        keep(self.get_node_by_output(output, search_in_parent_graphs=False))
    while pending:
        node = pending.pop()
        # A loop or branch node also reads the outer values its bodies use.
        for name in list(node.input) + list(node.get_implicit_inputs()):
            keep(self.get_node_by_output(name, search_in_parent_graphs=False))
    return list(kept)


@contextlib.contextmanager
def linear_pruning():
    """tf2onnx's `Graph.extract_sub_graph_nodes` replaced inside the block
    (thread-safe, nestable): the one method, restored when the last block
    using it ends."""
    from tf2onnx.graph import Graph

    with _LOCK:
        if _ACTIVE[0] == 0:
            _ORIGINAL[:] = [Graph.extract_sub_graph_nodes]
            Graph.extract_sub_graph_nodes = _extract_sub_graph_nodes
        _ACTIVE[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                Graph.extract_sub_graph_nodes = _ORIGINAL.pop()
