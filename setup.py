"""The conventional setup.py: a shim for tools that still call it.

The metadata, extras and console scripts live in pyproject.toml; setuptools
reads them from there, so this file stays one call.
"""

from setuptools import setup

setup()
