"""CTranslate2 imported with a CPU backend whose int8 products are exact on every x86-64 CPU.

On an x86-64 CPU not made by Intel, CTranslate2 computes with oneDNN unless
told otherwise (`CT2_USE_MKL`). On a CPU without VNNI instructions
(AVX2-only AMD EPYC machines, for one), oneDNN's int8 products multiply
unsigned by signed bytes with an instruction whose 16-bit sums saturate, and
the results move far beyond quantization's rounding: measured on the
CTranslate2 test suite's Transformer on such a machine, greedy ids equal to
float32 Keras's on 67% of the rows with oneDNN, 94.7% with Intel MKL (as on
Intel CPUs). Both backends are in CTranslate2's x86-64 wheels, so
`CT2_USE_MKL` defaults to 1 there; a value the user sets is kept, and other
machines are left alone (no MKL on ARM). CTranslate2 reads the variable
when it first computes, so it is set before the package is imported.
"""

import os
import platform

__all__ = ["import_ctranslate2"]

X86_64 = ("x86_64", "amd64")


def import_ctranslate2():
    """The `ctranslate2` module, `CT2_USE_MKL` defaulting to 1 on x86-64."""
    if platform.machine().lower() in X86_64:
        os.environ.setdefault("CT2_USE_MKL", "1")
    import ctranslate2

    return ctranslate2
