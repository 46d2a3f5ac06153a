"""The tfa.seq2seq side of measure 1, run in benchmarks/peers/.venv-tfa.

tensorflow-cpu 2.15.1 + tensorflow-addons 0.23.0: AttentionWrapper(GRUCell,
BahdanauAttention) decoded by BasicDecoder + TrainingSampler (the tfa NMT
tutorial's training setup), in a tf.function train step with Adam. Same
model as benchmarks/bench_decoder.py. Usage, from the repository root: python -m benchmarks.peers.tfa_decoder CONFIG_JSON [--profile]; it serves timing
requests on stdin (see common.RemoteSide), or prints an op profile.
"""

import json
import os
import sys
import warnings

# Set before TensorFlow is imported: it reads the log level once.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_addons as tfa  # noqa: E402

from benchmarks import bench_decoder, common  # noqa: E402


def main():
    cfg = json.loads(sys.argv[1])
    tf.keras.utils.set_random_seed(0)
    b, v, e, u = cfg["batch"], cfg["vocabulary"], cfg["embedding"], cfg["units"]
    # The very batch the other sides train on.
    source, target_in, target_out = bench_decoder.data(cfg)

    source_embedding = tf.keras.layers.Embedding(v, e)
    encoder = tf.keras.layers.Dense(u, activation="tanh")
    target_embedding = tf.keras.layers.Embedding(v, e)
    mechanism = tfa.seq2seq.BahdanauAttention(u, memory=None)
    cell = tfa.seq2seq.AttentionWrapper(tf.keras.layers.GRUCell(u), mechanism, attention_layer_size=None)
    jit = bool(cfg.get("jit", False))
    decoder = tfa.seq2seq.BasicDecoder(
        cell,
        tfa.seq2seq.sampler.TrainingSampler(),
        output_layer=tf.keras.layers.Dense(v),
        maximum_iterations=cfg["target_length"] if jit else None,
    )
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tf.keras.optimizers.Adam(1e-3)
    lengths = tf.fill([b], cfg["target_length"])

    def forward(src, tin):
        memory = encoder(source_embedding(src))
        mechanism.setup_memory(memory)
        state = cell.get_initial_state(batch_size=b, dtype=tf.float32)
        outputs, _, _ = decoder(target_embedding(tin), initial_state=state, sequence_length=lengths)
        return outputs.rnn_output

    forward(source, target_in)  # build the variables
    variables = None

    @tf.function(jit_compile=jit)
    def train_step(src, tin, tout):
        with tf.GradientTape() as tape:
            loss = loss_fn(tout, forward(src, tin))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    variables = (
        source_embedding.trainable_variables
        + encoder.trainable_variables
        + target_embedding.trainable_variables
        + mechanism.trainable_variables
        + cell.trainable_variables
        + decoder.trainable_variables
    )
    variables = list({id(w): w for w in variables}.values())
    tensors = [tf.constant(x) for x in (source, target_in, target_out)]

    def step():
        train_step(*tensors).numpy()

    if len(sys.argv) > 2 and sys.argv[2] == "--profile":
        for _ in range(3):
            step()
        print(json.dumps(common.profile_ops(step)), flush=True)
        return
    common.serve_worker(
        step,
        {
            "versions": {"tensorflow": tf.__version__, "tensorflow_addons": tfa.__version__},
            "parameters": int(sum(np.prod(w.shape) for w in variables)),
        },
    )


if __name__ == "__main__":
    main()
