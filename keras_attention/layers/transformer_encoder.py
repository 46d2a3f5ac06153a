"""The Transformer encoder (Vaswani et al. 2017): one layer, and a stack of them."""

import keras

from keras_attention import _checks
from keras_attention.layers.transformer_block import TransformerBlock, TransformerStackBase, padding_and_causal_mask

__all__ = ["TransformerEncoderLayer", "TransformerEncoderStack"]


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerEncoderLayer(TransformerBlock):
    """One Transformer encoder layer: self-attention, then a feed-forward network, each residual.

    Post-norm (the paper's) and pre-norm (`norm_first=True`, Xiong et al.
    2020, arXiv:2002.04745: trains without warm-up troubles, the default):

        post-norm:  h = LN(x + Drop(MHA(x, x)));   y = LN(h + Drop(FFN(h)))
        pre-norm:   h = x + Drop(MHA(LN(x), LN(x)));  y = h + Drop(FFN(LN(h)))
        FFN(h) = W_2 Drop_a(activation(W_1 h + b_1)) + b_2

    `Drop` is `dropout` (on each sublayer's output, before the residual sum),
    `Drop_a` `activation_dropout`; `attention_dropout` drops attention
    weights. The attention is this library's `MultiHeadAttention` (Keras's
    weight layout); with `use_rotary`, queries and keys are turned by a
    `RotaryPositionEmbedding` after their projections. A padding mask (the
    Keras mask, or `mask`) keeps every position from attending to padding;
    the outputs at padded positions are computed but carry no information
    from valid ones, and the mask passes on.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Shapes: inputs `(B, T, d)`, mask `(B, T)` bool; output `(B, T, d)`.

    Args:
        num_heads: attention heads `H`.
        intermediate_dim: the feed-forward network's hidden size.
        key_dim: each head's size (default `d / H`).
        dropout: the residual dropout rate (see above).
        attention_dropout: the attention weights' dropout rate.
        activation_dropout: the feed-forward hidden layer's dropout rate.
        activation: the feed-forward activation ("relu" in the paper).
        norm_first: pre-norm (True) or post-norm (False).
        layer_norm_epsilon: the layer normalisations' epsilon.
        use_rotary: rotary position embedding of the queries and keys
            (Su et al. 2021, arXiv:2104.09864).
        rotary_max_wavelength: the base of the rotary angles (10000 in the paper).
        kernel_initializer: of every projection's kernel.
        bias_initializer: of every projection's bias.
        seed: seed of the dropouts.

    Example:

    ```python
    layer = keras_attention.TransformerEncoderLayer(num_heads=2, intermediate_dim=32)
    x = np.random.rand(2, 5, 16).astype("float32")
    padding = np.array([[True] * 5, [True] * 3 + [False] * 2])
    y = layer(x, mask=padding)            # (2, 5, 16)
    ```
    """

    def build(self, input_shape):
        model_dim = _checks.check_known_last_dim(self, "inputs", input_shape)
        self.self_attention = self._attention("self_attention", model_dim)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_norm.build(input_shape)
        self._make_feed_forward()
        self._build_feed_forward(model_dim)
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward_norm.build(input_shape)
        self.built = True

    def call(self, inputs, mask=None, training=None):
        attention_mask = padding_and_causal_mask(mask, mask)
        attend = self._self_attention_sublayer(self.self_attention, attention_mask, training)
        x, _ = self._residual(inputs, self.self_attention_norm, attend, training)
        x, _ = self._residual(x, self.feed_forward_norm, lambda h: self._feed_forward(h, training), training)
        return x

    def compute_mask(self, inputs, mask=None):
        return mask


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerEncoderStack(TransformerStackBase):
    """`num_layers` `TransformerEncoderLayer`s in sequence (the Transformer's encoder).

        x_0 = inputs;  x_l = EncoderLayer_l(x_{l-1}, mask);  output = LN(x_L) with `final_norm`

    A pre-norm stack ends with a layer normalisation (`final_norm`, default:
    `norm_first`), as its layers' outputs are not normalised. The inputs are
    embeddings with their positions already added (`SinusoidalPositionEncoding`,
    `LearnedPositionEmbedding`), or plain embeddings with `use_rotary`.
    Named a stack so as not to be mistaken for keras-hub's
    `TransformerEncoder`, which is one layer.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Shapes: inputs `(B, T, d)`, mask `(B, T)` bool; output `(B, T, d)`.

    Args:
        num_layers: the number of layers `L`.
        final_norm: a layer normalisation after the last layer (default:
            `norm_first`).
        **layer_options: `TransformerEncoderLayer`'s arguments (`num_heads`,
            `intermediate_dim`, ...), the same for every layer.

    Example:

    ```python
    embedding = keras.layers.Embedding(20, 16, mask_zero=True)
    encoder = keras_attention.TransformerEncoderStack(2, num_heads=2, intermediate_dim=32)
    ids = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    memory = encoder(keras_attention.SinusoidalPositionEncoding()(embedding(ids)))  # (2, 4, 16)
    ```
    """

    layer_class = TransformerEncoderLayer

    def call(self, inputs, mask=None, training=None):
        x = inputs
        for layer in self.transformer_layers:
            x = layer(x, mask=mask, training=training)
        return x if self.output_norm is None else self.output_norm(x)
