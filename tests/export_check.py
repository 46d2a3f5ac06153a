"""Export smoke check shared by the layer tests: SavedModel and ONNX parity with Keras."""

import numpy as np
import onnx
import onnxruntime
import tensorflow as tf


def assert_export_parity(model, batches, directory, atol=1e-5, opset=17):
    """Export `model` both ways and compare with Keras on every batch.

    `batches` is a list of dicts {input name: array}; batches of different
    sizes and lengths check that both artifacts kept dynamic axes.
    """
    saved_model_dir = str(directory / "saved_model")
    onnx_path = str(directory / "model.onnx")
    model.export(saved_model_dir, format="tf_saved_model", verbose=False)
    model.export(onnx_path, format="onnx", opset_version=opset, verbose=False)

    onnx.checker.check_model(onnx.load(onnx_path))
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    # Keep the loaded object alive: its functions reference its variables.
    restored = tf.saved_model.load(saved_model_dir)
    input_names = [tensor.name for tensor in model.inputs]
    assert [i.name for i in session.get_inputs()] == [n.split(":")[0] for n in input_names]

    for batch in batches:
        ordered = [batch[name] for name in input_names]
        expected = np.asarray(model(ordered))
        from_saved_model = np.asarray(restored.serve(ordered))
        (from_onnx,) = session.run(None, dict(zip((i.name for i in session.get_inputs()), ordered)))
        np.testing.assert_allclose(from_saved_model, expected, atol=atol, err_msg="SavedModel")
        np.testing.assert_allclose(from_onnx, expected, atol=atol, err_msg="ONNX")
