"""Two of tf2onnx's (1.17) methods replaced while our conversions run: the
pruning of unused nodes, in linear time, and the optimizer passes, without
the bookkeeping each pass did.

Pruning. tf2onnx prunes the graph after every optimizer pass, in the main
graph and in every loop and branch body. Its `Graph.extract_sub_graph_nodes`
walks the graph back from each output separately and unites the walks, so
a loop body with forty loop-carried values is walked forty times, each walk
re-collecting the implicit inputs of the nested bodies. On a decoder with its
loop inside that was most of the conversion (measured on the sampling
decoder of tests/test_runtime_options_export.py: 37 of 70 s, the optimizer
54 s before, 33 s after). The replacement walks once from all the outputs
together: the same set of nodes (a node is kept when some output reaches
it through nodes the checker accepts, which does not depend on the output
the walk started from), and tests/test_tf2onnx_speedups.py checks that the
converted files are the same.

Optimizer passes. After each of its dozen passes, every round, tf2onnx's
`GraphOptimizerBase.optimize` rewrote every node's protobuf, serialising
every loop and branch body again (`Graph.update_proto`), and counted the
nodes by type twice for a log line. The passes read and change the graph's
own structures, not the protobufs, which are written once at the end
(`make_model`); the replacement keeps the pass and its pruning. Measured on
the test suite's beam Transformer decoder: the conversion 15.5 -> 12.6 s, an
ensemble of beam decoders 8.1 -> 4.8 s; the same nodes, checked by
tests/test_tf2onnx_speedups.py.
"""

import contextlib
import threading

_LOCK = threading.Lock()
_ACTIVE = [0]  # conversions running with the replacements installed
_ORIGINAL = {}


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


def _optimize(self, graph, iteration):
    """One optimizer pass on `graph` and the pruning after it
    (`GraphOptimizerBase.optimize` without rewriting the protobufs and
    counting the nodes)."""
    self.opt_iteration = iteration
    graph = self._optimize(graph)
    graph.delete_unused_nodes(graph.outputs)
    return graph


def _replacements():
    from tf2onnx.graph import Graph
    from tf2onnx.optimizer.optimizer_base import GraphOptimizerBase

    return [(Graph, "extract_sub_graph_nodes", _extract_sub_graph_nodes), (GraphOptimizerBase, "optimize", _optimize)]


@contextlib.contextmanager
def faster_tf2onnx():
    """tf2onnx's `Graph.extract_sub_graph_nodes` and
    `GraphOptimizerBase.optimize` replaced inside the block (thread-safe,
    nestable), restored when the last block using them ends."""
    replacements = _replacements()
    with _LOCK:
        if _ACTIVE[0] == 0:
            for owner, name, replacement in replacements:
                _ORIGINAL[owner, name] = getattr(owner, name)
                setattr(owner, name, replacement)
        _ACTIVE[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                for owner, name, _ in replacements:
                    setattr(owner, name, _ORIGINAL.pop((owner, name)))
