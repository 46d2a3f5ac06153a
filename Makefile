# Two commands: `make demo` (set up, then run the main job) and `make test`
# (set up, then run the whole test suite). Both create .venv when missing and
# install the package under constraints.txt, so a fresh machine with only
# python3 gets a known-good set of versions.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
PYTEST_ARGS ?=
# The suite spreads over the cores (pytest-xdist), one test file per worker
# at a time, so a module's fixtures (a trained smoke model) are built once;
# PYTEST_WORKERS=0 runs it in this process (for a debugger, or -x). The
# files go out in the suite's order, the longest measured first
# (tests/conftest.py, tests/module_seconds.json), not xdist's most-tests-first,
# which left the minutes-long example smoke runs to the end on one worker.
# One worker more than the cores, each worker one-threaded (tests/conftest.py):
# a worker waiting on a file, a subprocess's start or a tracing step leaves
# its core to another. Measured on the 2-core machine (clean-clone .ci/run):
# the TensorFlow suite 1594 s on 2 workers, 1538 s on 3; JAX 478 -> 385 s.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print((os.cpu_count() or 1) + 1)")
PYTEST := -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: demo test test-jax test-torch lint docs chromium tour bench g2p g2p-large g2p-engines gpu-check venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv installs every environment (pip installs uv itself, pinned): it fetches
# in parallel, where pip fetched one file at a time. Measured on the 2-core
# machine with nothing cached: the dev environment in 29 s where pip took
# several minutes. Local wheel folders that pip is told of (PIP_FIND_LINKS,
# e.g. a machine's CPU build of PyTorch) are passed on to uv, which reads no
# pip settings.
#
# --compile-bytecode writes every installed module's .pyc at install time.
# Python would otherwise compile TensorFlow's, Keras's and the rest's sources
# in every process that imports them wherever it may not write them back
# (PYTHONDONTWRITEBYTECODE is set on the project's 2-core machine): measured
# there, `import keras_attention` took 12.3 s without the .pyc files and
# 5.4 s with them, and two test modules' run 108 s against 83 s.
UV := $(BIN)/uv
UV_INSTALL = $(UV) pip install -q --compile-bytecode -c constraints.txt $(foreach folder,$(PIP_FIND_LINKS),--find-links $(folder))
# The project's own modules, compiled before each suite for the same reason
# (under a second; a stale .pyc is never used: Python checks the source's
# modification time).
BYTECODE := -m compileall -q -j 0 keras_attention examples benchmarks tests tools

$(UV): constraints.txt | $(BIN)/python
	$(PIP) install --disable-pip-version-check -q -c constraints.txt uv
	touch $@

# One stamp per set of extras: re-install when pyproject.toml or the pins change.
$(VENV)/.installed-%: pyproject.toml constraints.txt $(UV)
	$(UV_INSTALL) --python $(BIN)/python -e ".[$*]"
	touch $@

venv: $(VENV)/.installed-dev

test: $(VENV)/.installed-dev
	$(BIN)/python $(BYTECODE)
	$(BIN)/python $(PYTEST) $(PYTEST_ARGS)

# The backend-neutral tests (modules marked `pytestmark =
# pytest.mark.any_backend`) on JAX and on PyTorch, each in its own venv
# without TensorFlow (.venv-jax, .venv-torch; pinned in constraints.txt).
.venv-%/.installed: pyproject.toml constraints.txt $(UV)
	$(PYTHON) -m venv .venv-$*
	$(UV_INSTALL) --python .venv-$*/bin/python -e ".[$*,test]"
	touch $@

test-jax: .venv-jax/.installed
	.venv-jax/bin/python $(BYTECODE)
	KERAS_BACKEND=jax .venv-jax/bin/python $(PYTEST) $(PYTEST_ARGS)

test-torch: .venv-torch/.installed
	.venv-torch/bin/python $(BYTECODE)
	KERAS_BACKEND=torch .venv-torch/bin/python $(PYTEST) $(PYTEST_ARGS)

# The style CI enforces (settings in pyproject.toml): `ruff format .` fixes
# the formatting, `ruff check --fix .` what can be fixed mechanically.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The documentation site (mkdocs.yml) into build/site: --strict fails on any
# warning, broken link or unknown anchor. Also installs Debian's Chromium
# (as root, as CI runs), which tests/test_docs_site.py opens the site in.
docs: $(VENV)/.installed-dev chromium
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

chromium:
	@command -v chromium >/dev/null || { \
	    if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	    else echo "note: no chromium; tests/test_docs_site.py skips its browser checks (sudo apt-get install chromium)"; fi; }

# The main job: train the date translator, evaluate it (greedy and beam),
# plot its attention, export it to SavedModel and ONNX with a parity report
# (the installed keras-attention-export command), and translate a few dates
# through onnxruntime (keras-attention-serve). examples/, benchmarks/ and
# tools/ are packages run from the repository root with `python -m`.
demo: $(VENV)/.installed-onnx,plot
	$(BIN)/python -m examples.translate_dates --jit --out demo_output
	$(BIN)/keras-attention-export demo_output/dates_trainer.keras demo_output/export --force \
	    --signature translate=demo_output/dates_greedy.keras \
	    --signature translate_beam=demo_output/dates_beam.keras \
	    --vocabulary demo_output/vocabulary.json --sample-inputs demo_output/sample_inputs.json
	$(BIN)/keras-attention-serve demo_output/export --signature translate \
	    --inputs '{"source": ["tuesday 3 march 2015", "3/3/15", "Mar 3, 2015", "03.03.2015", "the 1st of may 1999"]}'

# Grapheme-to-phoneme on real data (CMUdict beside Phonetisaurus, SIGMORPHON
# 2021 medium and eng_us) and the CMUdict model's serving studies (the
# ensemble, then one of its models alone, float32 and int8): the runs behind
# the README's "Results on real data", whose tables are regenerated from
# their results files. About 2 hours on 2 CPU cores; each training resumes
# where a killed run stopped.
g2p: $(VENV)/.installed-g2p
	$(BIN)/python -m examples.g2p.train cmudict --out runs/g2p_cmudict --results results/g2p_cmudict.json
	$(BIN)/python -m examples.g2p.serving runs/g2p_cmudict --beam-widths 1 2 5 --int8 \
	    --results results/g2p_cmudict_serving.json
	$(BIN)/python -m examples.g2p.serving runs/g2p_cmudict --members 1 --beam-widths 1 2 5 --int8 \
	    --results results/g2p_cmudict_serving_one.json
	$(BIN)/python -m examples.g2p.train sigmorphon --languages medium eng_us --out runs/g2p_sigmorphon \
	    --results results/g2p_sigmorphon2021.json
	$(BIN)/python -m examples.g2p.report

# One CMUdict model of the default ensemble's size trained longer (about 90
# minutes on 2 cores): the README's comparison row.
g2p-large: $(VENV)/.installed-g2p
	$(BIN)/python -m examples.g2p.train cmudict --ensemble 1 --epochs 16 --no-peer --no-export \
	    --out runs/g2p_cmudict_big --results results/g2p_cmudict_large.json
	$(BIN)/python -m examples.g2p.report

# One CMUdict Transformer served by every engine side by side (Keras,
# onnxruntime, CTranslate2, LiteRT, OpenVINO, and Phonetisaurus): the table
# of docs/serving.md, regenerated from results/g2p_engines.json. About 30
# minutes to train and 30 to measure on 2 CPU cores.
g2p-engines: $(VENV)/.installed-g2p,ctranslate2,litert,openvino
	$(BIN)/python -m examples.g2p.train cmudict --architecture transformer --model-dim 128 --layers 3 --heads 4 \
	    --ff-dim 512 --dropout 0.1 --ensemble 1 --jobs 1 --batch-size 128 --learning-rate 0.002 \
	    --warmup-steps 800 --epochs 14 --max-minutes 30 --patience 14 --out runs/tf_d128
	$(BIN)/python -m examples.g2p.engines runs/tf_d128 --sample 256 --batch-one-sample 32 --wer-words 1000 \
	    --results results/g2p_engines.json
	$(BIN)/python -m examples.g2p.engines --report

# A quick tour: one small model per attention layer, with heat-maps.
tour: $(VENV)/.installed-onnx,plot
	$(BIN)/python -m examples.layer_tour --out runs/tour

# Benchmarks against the peers (keras.layers, a plain Keras loop, tfa.seq2seq
# in its own environment: benchmarks/peers/.venv-tfa, built on first use);
# writes benchmarks/results.json and benchmarks/results.md. BENCH_ARGS:
# e.g. "--only decoder" or "--quick".
BENCH_ARGS ?=
bench: $(VENV)/.installed-dev
	PYTHON=$(PYTHON) $(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# On a lent GPU machine, which has JAX and PyTorch with CUDA but no
# TensorFlow and no network (Keras travels as a wheel): the decoder's
# training step in mixed precision, MultiHeadAttention's fused path, flash
# attention and an ONNX export, a few minutes (tools/gpu_check.py).
GPU_CHECK_ARGS ?=
gpu-check:
	$(PYTHON) -m tools.gpu_check $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .venv-jax .venv-torch demo_output runs .pytest_cache build
