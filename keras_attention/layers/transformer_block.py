"""What the Transformer encoder and decoder layers share: settings, sublayers, residuals.

`TransformerBlock` is the base of `TransformerEncoderLayer` and
`TransformerDecoderLayer`: it checks and serialises their common options,
makes the attention, feed-forward and normalisation sublayers, and wraps each
sublayer in its residual connection, pre-norm or post-norm. Attention goes
through `MultiHeadAttention.project_query/project_key/project_value/attend`,
so a rotary embedding can turn the projected queries and keys without a weight
of its own, and a decoder can project the memory once and cache its keys.
"""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.layers.layer_norm import ExportableLayerNormalization
from keras_attention.layers.multi_head import MultiHeadAttention
from keras_attention.layers.positional_rotary import RotaryPositionEmbedding

__all__ = ["TransformerBlock", "TransformerStackBase", "padding_and_causal_mask"]


def padding_and_causal_mask(query_valid, key_valid, causal_length=None):
    """`(B, Tq, Tk)` bool: a valid query may see a valid key (and, with
    `causal_length` = T, only keys at or before its own position); None when
    nothing is masked."""
    mask = None
    if key_valid is not None:
        mask = ops.expand_dims(ops.cast(key_valid, "bool"), 1)
    if query_valid is not None:
        rows = ops.expand_dims(ops.cast(query_valid, "bool"), 2)
        mask = rows if mask is None else ops.logical_and(rows, mask)
    if causal_length is not None:
        positions = ops.arange(causal_length)
        causal = ops.expand_dims(ops.less_equal(ops.expand_dims(positions, 0), ops.expand_dims(positions, 1)), 0)
        mask = causal if mask is None else ops.logical_and(mask, causal)
    return mask


class TransformerBlock(keras.layers.Layer):
    """Base of the Transformer layers: see `TransformerEncoderLayer` for the options."""

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        key_dim=None,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation="relu",
        norm_first=True,
        layer_norm_epsilon=1e-5,
        use_rotary=False,
        rotary_max_wavelength=10000.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _checks.check_positive_int(self, "num_heads", num_heads)
        self.intermediate_dim = _checks.check_positive_int(self, "intermediate_dim", intermediate_dim)
        self.key_dim = _checks.check_positive_int(self, "key_dim", key_dim, allow_none=True)
        self.dropout = _checks.check_fraction(self, "dropout", dropout)
        self.attention_dropout = _checks.check_fraction(self, "attention_dropout", attention_dropout)
        self.activation_dropout = _checks.check_fraction(self, "activation_dropout", activation_dropout)
        self.activation = keras.activations.get(activation)
        self.norm_first = _checks.check_bool(self, "norm_first", norm_first)
        self.layer_norm_epsilon = _checks.check_number(
            self, "layer_norm_epsilon", layer_norm_epsilon, minimum=0, strict=True
        )
        self.use_rotary = _checks.check_bool(self, "use_rotary", use_rotary)
        self.rotary_max_wavelength = _checks.check_number(
            self, "rotary_max_wavelength", rotary_max_wavelength, minimum=0, strict=True
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.supports_masking = True
        self.rotary = RotaryPositionEmbedding(rotary_max_wavelength, dtype=self.dtype_policy) if use_rotary else None
        self._seed_offset = 0

    # ------------------------------------------------------------- sublayers

    def _next_seed(self):
        # Every dropout draws its own stream from the one seed.
        self._seed_offset += 1
        return None if self.seed is None else self.seed + self._seed_offset

    def _attention(self, name, model_dim, memory_dim=None):
        """A built `MultiHeadAttention` over inputs of `model_dim` (and a memory of `memory_dim`)."""
        head_size = self._head_size(model_dim)
        if self.use_rotary and head_size % 2:
            raise ValueError(
                f"{_checks.owner_name(self)}: `use_rotary` needs an even head size; got key_dim {head_size}."
            )
        attention = MultiHeadAttention(
            self.num_heads,
            head_size,
            dropout=self.attention_dropout,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            seed=self._next_seed(),
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build((None, None, model_dim), (None, None, model_dim if memory_dim is None else memory_dim))
        return attention

    def _make_feed_forward(self):
        self.feed_forward_in = keras.layers.Dense(
            self.intermediate_dim,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="feed_forward_in",
        )
        self.feed_forward_out = None  # sized at build: the model size
        self.residual_dropout = keras.layers.Dropout(self.dropout, seed=self._next_seed(), dtype=self.dtype_policy)
        self.inner_dropout = keras.layers.Dropout(
            self.activation_dropout, seed=self._next_seed(), dtype=self.dtype_policy
        )

    def _norm(self, name):
        return ExportableLayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    def _head_size(self, model_dim):
        if self.key_dim is not None:
            return self.key_dim
        if model_dim % self.num_heads:
            raise ValueError(
                f"{_checks.owner_name(self)}: the model size {model_dim} must divide by `num_heads` "
                f"{self.num_heads} when `key_dim` is not given; got inputs of size {model_dim}."
            )
        return model_dim // self.num_heads

    def _build_feed_forward(self, model_dim):
        self.feed_forward_in.build((None, None, model_dim))
        if self.feed_forward_out is None:
            self.feed_forward_out = keras.layers.Dense(
                model_dim,
                kernel_initializer=self.kernel_initializer,
                bias_initializer=self.bias_initializer,
                dtype=self.dtype_policy,
                name="feed_forward_out",
            )
        self.feed_forward_out.build((None, None, self.intermediate_dim))

    # ------------------------------------------------------------- computing

    def _residual(self, x, norm, sublayer, training):
        """`x + dropout(sublayer(norm(x)))` pre-norm, `norm(x + dropout(sublayer(x)))` post-norm;
        `sublayer(h)` returns `(output, extra)`, and `extra` is returned along."""
        output, extra = sublayer(norm(x) if self.norm_first else x)
        x = x + self.residual_dropout(output, training=training)
        return (x if self.norm_first else norm(x)), extra

    def _feed_forward(self, h, training):
        inner = self.inner_dropout(self.activation(self.feed_forward_in(h)), training=training)
        return self.feed_forward_out(inner), None

    def _rotate(self, projected, start):
        return projected if self.rotary is None else self.rotary(projected, start=start)

    def _self_attention_sublayer(self, attention, mask, training, return_weights=False):
        def sublayer(h):
            query = self._rotate(attention.project_query(h), 0)
            key = self._rotate(attention.project_key(h), 0)
            return attention.attend(
                query,
                key,
                attention.project_value(h),
                mask,
                training=training,
                return_attention_scores=return_weights,
            )

        return sublayer

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation_dropout": self.activation_dropout,
                "activation": keras.activations.serialize(self.activation),
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_rotary": self.use_rotary,
                "rotary_max_wavelength": self.rotary_max_wavelength,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "seed": self.seed,
            }
        )
        return config


def _layer_seeded(options, index):
    """Layer `index`'s options: its own dropout seed, so layers do not drop alike."""
    seed = options.get("seed")
    return options if seed is None else {**options, "seed": seed + 1000 * index}


class TransformerStackBase(keras.layers.Layer):
    """Base of the stacks: `num_layers` layers of `layer_class`, one set of
    options, and a final layer normalisation (default: with pre-norm)."""

    layer_class = None

    def __init__(self, num_layers, final_norm=None, **layer_options):
        base = {key: layer_options.pop(key) for key in ("name", "dtype", "trainable") if key in layer_options}
        super().__init__(**base)
        self.num_layers = _checks.check_positive_int(self, "num_layers", num_layers)
        self.transformer_layers = [
            self.layer_class(**_layer_seeded(layer_options, i), dtype=self.dtype_policy, name=f"layer_{i}")
            for i in range(num_layers)
        ]
        first = self.transformer_layers[0]
        self.final_norm = first.norm_first if final_norm is None else _checks.check_bool(self, "final_norm", final_norm)
        self.output_norm = first._norm("output_norm") if self.final_norm else None
        self.supports_masking = True

    def build(self, input_shape, *memory_shape):
        for layer in self.transformer_layers:
            layer.build(input_shape, *memory_shape)
        if self.output_norm is not None:
            self.output_norm.build(input_shape)
        self.built = True

    def _normed(self, x):
        return x if self.output_norm is None else self.output_norm(x)

    def compute_mask(self, inputs, *args, mask=None, **kwargs):
        return mask

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "final_norm": self.final_norm})
        own = set(config)
        config.update({k: v for k, v in self.transformer_layers[0].get_config().items() if k not in own})
        return config
