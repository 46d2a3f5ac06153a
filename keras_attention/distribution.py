"""Model parallelism for the library's layers: a `keras.distribution.LayoutMap` of their weights.

`keras.distribution.ModelParallel` places each variable by its path
(`variable.path`, e.g. `"transformer_decoder_stack/layer_0/cross_attention/
query_kernel"`) through a `LayoutMap` of regular expressions. `layout_map`
returns one that knows the paths this library's layers give their weights,
so a model built from them shards without a line of model code changing.
"""

import re

import keras

from keras_attention import _checks

__all__ = ["layout_map"]

# Any enclosing layers (a model's or a stack's path), or none.
_ANY = r"(?:.*/)?"
# A `MultiHeadAttention` under the names the library gives it: a Transformer
# layer's sub-layers (inside a stack, `layer_<i>`; on their own, their class's
# default name) or a bare one under its default name. `SelfAttention` (the
# single-head layer, 2-D kernels) has the default name `self_attention` too,
# so the Transformer's sub-layers are recognised with their owner only.
_MULTI_HEAD = (
    _ANY + r"(?:(?:layer_\d+|transformer_(?:en|de)coder_layer(?:_\d+)?)/(?:self|cross)_attention"
    r"|multi_head_attention(?:_\d+)?)/"
)
_ADDITIVE = _ANY + r"additive_attention(?:_\d+)?/"


def _rules(model, output_projection):
    """(path pattern, axes) for every sharded weight; `model` is the mesh axis name."""
    rules = [
        # Heads split across the axis (Megatron-LM's column-parallel
        # projections, arXiv:1909.08053): each device owns whole heads, so
        # only the output projection's contraction over heads reduces.
        (_MULTI_HEAD + r"(?:query|key|value)_kernel", (None, model, None)),
        (_MULTI_HEAD + r"(?:query|key|value)_bias", (model, None)),
        (_MULTI_HEAD + r"output_kernel", (model, None, None)),
        # The feed-forward network: the hidden units split, W_1 by columns
        # and W_2 by rows, one reduction per block.
        (_ANY + r"feed_forward_in/kernel", (None, model)),
        (_ANY + r"feed_forward_in/bias", (model,)),
        (_ANY + r"feed_forward_out/kernel", (model, None)),
        # Additive (Bahdanau) scores: the hidden units of tanh(W_q q + W_k k).
        (_ADDITIVE + r"(?:query|key)_kernel", (None, model)),
        (_ADDITIVE + r"(?:score_vector|bias)", (model,)),
        # Token and learned position embeddings (Keras's `Embedding` and
        # `LearnedPositionEmbedding` both name theirs `embeddings`): the
        # feature axis, so a lookup needs no gather across devices.
        (_ANY + r"embeddings", (None, model)),
    ]
    if output_projection is not None:
        # The vocabulary axis: each device scores its share of the tokens.
        rules += [
            (_ANY + rf"(?:{output_projection})/kernel", (None, model)),
            (_ANY + rf"(?:{output_projection})/bias", (model,)),
        ]
    return rules


def layout_map(device_mesh, model_axis="model", output_projection="readout"):
    """A `keras.distribution.LayoutMap` sharding this library's weights along one mesh axis.

    Tensor (model) parallelism in the manner of Megatron-LM: each sharded
    weight is split along one axis over the devices of `model_axis`, the
    others replicated. What is split, matched by weight path:

    | weights | path (any enclosing layers) | split axis |
    |---|---|---|
    | `MultiHeadAttention` query/key/value kernels `(d, H, k)`, biases `(H, k)` | `.../layer_<i>/self_attention/`, `.../cross_attention/`, `multi_head_attention/` | heads |
    | `MultiHeadAttention` output kernel `(H, k, d)` | the same | heads |
    | Transformer feed-forward `feed_forward_in` kernel `(d, f)`, bias `(f,)`; `feed_forward_out` kernel `(f, d)` | `.../feed_forward_in/`, `.../feed_forward_out/` | `f` |
    | `AdditiveAttention` query/key kernels `(d, u)`, score vector and bias `(u,)` | `.../additive_attention/` | `u` |
    | embeddings `(V, d)` (`keras.layers.Embedding`, `LearnedPositionEmbedding`) | `.../embeddings` | `d` |
    | output projection kernel `(d, V)`, bias `(V,)` (a `Dense` named `output_projection`) | `.../readout/` | `V` |

    Everything else (layer norms, the attention cells' recurrent kernels,
    output biases of the attention) stays replicated. The patterns follow
    the names the library gives its sub-layers and Keras's default layer
    names; a layer given another name is not matched (replicated, still
    correct): add an entry for it (`layouts["my_block/self_attention/
    query_kernel"] = (None, "model", None)`). Each split axis's size must
    be a multiple of the `model_axis` size (heads, `f`, `u`, `d`, `V`).

    Use it with `keras.distribution.ModelParallel` on JAX (Keras 3 has no
    `keras.distribution` on PyTorch); results equal the unsharded model's
    to float rounding, and the in-graph searches run unchanged (see the
    documentation's "Scaling out" page).

    Paper: Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter
    Language Models Using Model Parallelism", arXiv:1909.08053.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with an axis named
            `model_axis` (typically `("batch", "model")`).
        model_axis: the mesh axis the weights are split along.
        output_projection: a regular expression for the name of the `Dense`
            layer that turns decoder states into vocabulary logits (the
            examples call it `readout`), or None to replicate it.

    Returns:
        A new `keras.distribution.LayoutMap` on `device_mesh`; add entries
        to it for weights of your own.

    Example:
        ```python
        import keras
        from keras_attention.distribution import layout_map

        mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices=["cpu:0", "cpu:1"])
        layouts = layout_map(mesh)
        path = "transformer_decoder_stack/layer_0/cross_attention/query_kernel"
        assert layouts[path].axes == (None, "model", None)
        assert layouts["readout/kernel"].axes == (None, "model")
        assert layouts["transformer_decoder_stack/layer_0/self_attention_norm/gamma"] is None
        # On JAX, with the devices of the mesh:
        # keras.distribution.set_distribution(
        #     keras.distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch"))
        # then build the model as usual.
        ```
    """
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise TypeError(
            f"layout_map: `device_mesh` must be a keras.distribution.DeviceMesh; received {device_mesh!r} "
            f"of type {type(device_mesh).__name__}."
        )
    _checks.check_choice("layout_map", "model_axis", model_axis, list(device_mesh.axis_names))
    if output_projection is not None:
        if not isinstance(output_projection, str):
            raise TypeError(
                "layout_map: `output_projection` must be a layer name (a regular expression) or None; "
                f"received {output_projection!r} of type {type(output_projection).__name__}."
            )
        try:
            re.compile(output_projection)
        except re.error as error:
            raise ValueError(
                f"layout_map: `output_projection` must be a valid regular expression; received "
                f"{output_projection!r} ({error})."
            ) from None
    layouts = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in _rules(model_axis, output_projection):
        layouts[pattern] = axes
    return layouts
