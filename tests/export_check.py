"""Export smoke check shared by the tests: SavedModel and ONNX parity with Keras."""

import keras
import numpy as np
import onnx
import onnxruntime
import tensorflow as tf

from keras_attention.export.tf2onnx_speedups import faster_tf2onnx


def keras_onnx_export(model, path, **options):
    """Keras's own `model.export(path, format="onnx")`, with tf2onnx's pruning and
    optimizer bookkeeping replaced as our exporter has them: the converted file
    is the same (tests/test_tf2onnx_speedups.py), a decode loop converts in a
    fraction of the time."""
    with faster_tf2onnx():
        model.export(str(path), format="onnx", verbose=False, **options)


def assert_export_parity(model, batches, directory, atol=1e-5, opset=17):
    """Export `model` both ways and compare every output with Keras on every batch.

    `batches` is a list of dicts {input name: array}; batches of different
    sizes and lengths check that both artifacts kept dynamic axes. Works for
    one or several inputs and outputs.
    """
    saved_model_dir = str(directory / "saved_model")
    onnx_path = str(directory / "model.onnx")
    model.export(saved_model_dir, format="tf_saved_model", verbose=False)
    keras_onnx_export(model, onnx_path, opset_version=opset)

    onnx.checker.check_model(onnx.load(onnx_path))
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    # Keep the loaded object alive: its functions reference its variables.
    restored = tf.saved_model.load(saved_model_dir)
    input_names = [tensor.name for tensor in model.inputs]
    onnx_names = [i.name for i in session.get_inputs()]
    assert onnx_names == [n.split(":")[0] for n in input_names]

    for batch in batches:
        ordered = [batch[name] for name in input_names]
        # Feed the structure the model was built with: a list, or one tensor.
        model_input = ordered if isinstance(model.input, (list, tuple)) else ordered[0]
        expected = [np.asarray(x) for x in keras.tree.flatten(model(model_input))]
        from_saved_model = [np.asarray(x) for x in keras.tree.flatten(restored.serve(model_input))]
        from_onnx = session.run(None, dict(zip(onnx_names, ordered)))
        assert len(from_saved_model) == len(from_onnx) == len(expected)
        for index, want in enumerate(expected):
            np.testing.assert_allclose(from_saved_model[index], want, atol=atol, err_msg=f"SavedModel output {index}")
            np.testing.assert_allclose(from_onnx[index], want, atol=atol, err_msg=f"ONNX output {index}")
