"""Grapheme-to-phoneme models for any pronunciation lexicon: the `keras-attention-g2p` command.

    keras-attention-g2p train --lexicon lexicon.tsv --out model/
    keras-attention-g2p apply --model model/ --words words.txt --nbest 2
    keras-attention-g2p evaluate --model model/ --test test.tsv

`read_lexicon` reads TSV and CMUdict files line by line (lexicon.py);
`choose_settings` is the rule that sizes the model and its training from the
lexicon (settings.py). The model (a BiLSTM encoder and an attention LSTM
decoder, model.py, or a Transformer, transformer_model.py), its training (training.py, members.py), the exported
ONNX pronouncer (pronouncer.py) and the Phonetisaurus peer (peer.py) are
imported only when a command needs them.
"""

from keras_attention.g2p.lexicon import Lexicon, LexiconError, read_lexicon
from keras_attention.g2p.settings import choose as choose_settings

__all__ = ["Lexicon", "LexiconError", "choose_settings", "read_lexicon"]
