"""tf2onnx's methods replaced during ONNX conversion
(keras_attention/export/tf2onnx_speedups.py). The linear-time pruning: on
every call a real conversion makes, in the main graph and in the loop and
branch bodies of a beam-search decoder, it keeps exactly the nodes tf2onnx's
own walk keeps, with the walk's checker too. The optimizer passes without
their bookkeeping: the same nodes, in every body, as tf2onnx's own passes,
and the same outputs. Both are tf2onnx's methods again once the conversions
end."""

import collections
import threading

import pytest
import tensorflow as tf

pytest.importorskip("tf2onnx")
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
from tf2onnx.graph import Graph  # noqa: E402
from tf2onnx.optimizer.optimizer_base import GraphOptimizerBase  # noqa: E402

from keras_attention.export.tf2onnx_speedups import _extract_sub_graph_nodes, _optimize, faster_tf2onnx  # noqa: E402
from tests.export_models import beam  # noqa: E402


def _some_refused(node):
    return len(node.name) % 3 != 0


def _explicit_inputs_only(graph, outputs):
    """The names of the nodes `outputs` reach through explicit inputs alone."""
    pending = [graph.get_node_by_output(o, search_in_parent_graphs=False) for o in outputs]
    kept = set()
    while pending:
        node = pending.pop()
        if node is not None and node.name not in kept:
            kept.add(node.name)
            pending += [graph.get_node_by_output(i, search_in_parent_graphs=False) for i in node.input]
    return kept


def _branch_reading_its_own_value():
    """`where(x > 0, log(x) * 3, x)` as a `tf.cond` per batch: in ONNX the
    `If` node reads `log(x) * 3` from the outer graph implicitly (an ONNX
    branch has no inputs), and nothing else reads it."""

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.float32)])
    def function(x):
        only_the_branch_reads_me = tf.math.log(tf.abs(x) + 1.0) * 3.0
        return tf.cond(tf.reduce_sum(x) > 0, lambda: only_the_branch_reads_me + 1.0, lambda: x - 1.0)

    return function


def test_keeps_the_nodes_tf2onnx_keeps_on_every_call_of_a_decoder_s_conversion(monkeypatch):
    import tf2onnx

    original = Graph.extract_sub_graph_nodes
    calls = []

    def both(self, outputs_name, input_checker=None, remove_unused_inputs=True):
        want = original(self, outputs_name, input_checker, remove_unused_inputs)
        got = _extract_sub_graph_nodes(self, outputs_name, input_checker, remove_unused_inputs)
        # The walk's boundary: tf2onnx's own rewriters pass a checker only for
        # TensorFlow 1 control flow, so one that refuses some nodes is tried here.
        refused = original(self, outputs_name, _some_refused, remove_unused_inputs)
        got_refused = _extract_sub_graph_nodes(self, outputs_name, _some_refused, remove_unused_inputs)
        calls.append(
            (
                ({n.name for n in want}, {n.name for n in refused}),
                ({n.name for n in got}, {n.name for n in got_refused}),
                len(got) == len(set(got)),
                self.parent_graph is not None,
                any(n.get_body_graphs() for n in got),
                0 < len(refused) < len(want),
                {n.name for n in want}
                != _explicit_inputs_only(
                    self, list(outputs_name) + ([] if remove_unused_inputs else [i.output[0] for i in self.inputs])
                ),
            )
        )
        return want

    monkeypatch.setattr(Graph, "extract_sub_graph_nodes", both)
    model = beam()
    decoder = tf.function(lambda source: model(source), input_signature=[tf.TensorSpec((None, None), tf.int32)])
    for function in (decoder, _branch_reading_its_own_value()):
        tf2onnx.convert.from_function(function, input_signature=function.input_signature, opset=17)
    mismatched = [i for i, (want, got, *_rest) in enumerate(calls) if want != got]
    assert not mismatched, f"{len(mismatched)} of {len(calls)} calls differ, first: {calls[mismatched[0]][:2]}"
    assert all(unique for _, _, unique, *_ in calls)
    # The calls covered what matters: loop bodies, nodes holding bodies,
    # nodes kept only as a body's implicit input, a checker that refuses,
    # and graphs of many nodes.
    assert sum(inside for *_, inside, _, _, _ in calls) >= 10
    assert any(holds for *_, holds, _, _ in calls)
    assert sum(cut for *_, cut, _ in calls) >= 10
    assert any(implicit for *_, implicit in calls)
    assert max(len(want) for (want, _), *_ in calls) >= 100


def _node_counts(graph):
    """{op type: count} over `graph` and, prefixed by their nesting, its bodies."""
    counts = collections.Counter(node.op_type for node in graph.node)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                counts.update({f"{node.op_type}/{k}": v for k, v in _node_counts(attribute.g).items()})
    counts["initializers"] = len(graph.initializer)
    return counts


def test_the_passes_without_their_bookkeeping_leave_the_nodes_tf2onnx_s_passes_leave():
    import tf2onnx

    model = beam()
    decoder = tf.function(lambda source: model(source), input_signature=[tf.TensorSpec((None, None), tf.int32)])
    source = np.array([[3, 4, 5, 0], [6, 0, 0, 0]], "int32")
    for function, feed in ((decoder, source), (_branch_reading_its_own_value(), np.array([1.5, -2.0], "float32"))):
        protos = []
        for passes in (GraphOptimizerBase.optimize, _optimize):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(GraphOptimizerBase, "optimize", passes)
                proto, _ = tf2onnx.convert.from_function(function, input_signature=function.input_signature, opset=17)
            protos.append(proto)
        theirs, ours = (_node_counts(proto.graph) for proto in protos)
        assert ours == theirs
        assert sum(v for k, v in theirs.items() if "/" in k) > 0  # bodies compared too
        outputs = []
        for proto in protos:
            session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
            outputs.append(session.run(None, {session.get_inputs()[0].name: feed}))
        for theirs_output, ours_output in zip(*outputs):
            np.testing.assert_array_equal(ours_output, theirs_output)


def test_tf2onnx_s_methods_are_back_after_the_block_and_after_nested_or_concurrent_blocks():
    originals = (Graph.extract_sub_graph_nodes, GraphOptimizerBase.optimize)

    def replaced():
        return Graph.extract_sub_graph_nodes is _extract_sub_graph_nodes and GraphOptimizerBase.optimize is _optimize

    def restored():
        return (Graph.extract_sub_graph_nodes, GraphOptimizerBase.optimize) == originals

    with faster_tf2onnx():
        assert replaced()
        with faster_tf2onnx():
            assert replaced()
        assert replaced()
    assert restored()

    inside, leave = threading.Barrier(3), threading.Barrier(3)

    def convert():
        with faster_tf2onnx():
            inside.wait()
            leave.wait()

    threads = [threading.Thread(target=convert) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    assert replaced()
    leave.wait()
    for thread in threads:
        thread.join()
    assert restored()

    with pytest.raises(RuntimeError), faster_tf2onnx():
        raise RuntimeError("a failed conversion")
    assert restored()
