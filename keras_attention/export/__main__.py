"""`python -m keras_attention.export`: the `keras-attention-export` command."""

import sys

from keras_attention.export.cli import main

if __name__ == "__main__":
    sys.exit(main())
