"""`python -m keras_attention.g2p`: the `keras-attention-g2p` command."""

import sys

from keras_attention.g2p.cli import main

sys.exit(main())
