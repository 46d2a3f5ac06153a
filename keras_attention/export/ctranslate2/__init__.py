"""CTranslate2: the library's Transformer encoder-decoder as a CTranslate2 model directory.

`export_ctranslate2` reads the layers a user composed the Transformer from
(source embedding, source positions, `TransformerEncoderStack`; and the
`TransformerInferenceDecoder` holding the target embedding, target
positions, `TransformerDecoderStack` and read-out), fills CTranslate2's
`TransformerSpec` through a `ctranslate2.converters.Converter` and writes the
model directory that `ctranslate2.Translator` loads. `translate_ids` runs it
on id arrays and returns ids, lengths and scores laid out as our decoders'.

What maps to what (CTranslate2 linears are `(out, in)`; Keras's
`(in, out)`):

| ours                                          | CTranslate2                                  |
|-----------------------------------------------|----------------------------------------------|
| query/key/value kernels `(d, H, k)`, biases   | self-attention `linear[0]`, fused `(3Hk, d)` |
| cross-attention query; key and value          | `linear[0]`; fused `linear[1]` `(2Hk, d)`    |
| output kernel `(H, k, d)`                     | `linear[-1]` `(d, Hk)`                       |
| `feed_forward_in`, `feed_forward_out`         | `ffn.linear_0`, `ffn.linear_1`               |
| each sublayer's norm (`gamma`, `beta`)        | the sublayer spec's `layer_norm`             |
| `norm_first`, the stacks' `output_norm`       | `pre_norm`, `no_final_norm`, `layer_norm`    |
| `layer_norm_epsilon`                          | `config.layer_norm_epsilon`                  |
| embeddings (times `output_scale`, if any)     | `embeddings`, `scale_embeddings = False`     |
| position layer, positions `0..P-1`            | `position_encodings.encodings` `(P, d)`      |
| read-out `Dense`                              | `decoder.projection`                         |
| `start_token`, `end_token`                    | `decoder_start_token`, `eos_token`           |

The position table is our own layer's output for positions `0..P-1`, so
sinusoidal and learned positions both match exactly, whatever layout
CTranslate2's built-in sinusoids have. What the spec cannot express is
refused before anything is written: a recurrent decoder, rotary positions, an
activation CTranslate2 lacks, heads whose sizes do not add up to the model
size, a post-norm stack with a final norm, different layer-norm epsilons,
vocabularies of the wrong size or with repeated tokens.

The search options stay on each side: CTranslate2 takes them per call
(`translate_batch`). Greedy is `beam_size=1`; CTranslate2's
`min_decoding_length` defaults to 1 (ours: `min_length=0`). Its beam search
is our `method="refilling_beam"` (`RefillingBeamSearch`): a finished
hypothesis leaves the beam for a pool and the beam is refilled, with the
same stopping rule; `beam_size`, `num_hypotheses`, `length_penalty`,
`coverage_penalty` are `beam_width`, `num_hypotheses`, `length_penalty_weight`
and `coverage_penalty_weight`, and the two return the same n-best lists and
scores (`log P / n ** alpha`, `n` counting the end token, which CTranslate2's
translator scores and then drops from the tokens; with a coverage penalty,
for one source per call: docs/serving.md has why, and the measures). Our `method="beam"` keeps a finished hypothesis in its slot, as
tfa did, and ranks by the GNMT penalty `((5 + n) / 6) ** alpha`: the best
hypotheses differ on a few rows. `return_attention` is our `alignments`
(the last layer's heads averaged).

The position tables bound what the model takes: a source of at most as many
tokens as the source table's rows, at most as many decoding steps as the
target table's. `export_ctranslate2` records both in `config.json`
(`position_limits` reads them back) and `translate_ids` and
`keras-attention-serve --engine ctranslate2` refuse a request beyond them
before CTranslate2 runs, naming the input, its value and the limit.

The modules: `converter` (the checks and `KerasTransformerConverter`, which
fills the spec), `writer` (`export_ctranslate2`: the directory, written
beside itself and renamed into place), `positions` (the recorded limits and
the checks against them), `library` (CTranslate2 imported with a CPU backend
whose int8 products do not saturate) and `runner` (`translate_ids`, and `read_model`,
which reads a directory's vocabularies and limits once while its files are
unchanged).
"""

INSTALL = "pip install 'keras-attention-decoders[ctranslate2]'"
try:
    # Before any module of the package imports it (library.py says why).
    from keras_attention.export.ctranslate2.library import import_ctranslate2

    import_ctranslate2()
except ImportError as error:  # the package is the extra's: say how to get it
    raise ImportError(f"keras_attention.export.ctranslate2 needs CTranslate2: {INSTALL}") from error

from keras_attention.export.ctranslate2.converter import (  # noqa: E402
    DEFAULT_MAX_POSITIONS,
    QUANTIZATIONS,
    KerasTransformerConverter,
)
from keras_attention.export.ctranslate2.positions import position_limits  # noqa: E402
from keras_attention.export.ctranslate2.runner import model_config, read_model, translate_ids  # noqa: E402
from keras_attention.export.ctranslate2.writer import export_ctranslate2  # noqa: E402

__all__ = [
    "DEFAULT_MAX_POSITIONS",
    "INSTALL",
    "QUANTIZATIONS",
    "KerasTransformerConverter",
    "export_ctranslate2",
    "model_config",
    "position_limits",
    "read_model",
    "translate_ids",
]
