"""A decoder step read from a table, for the searches' brute-force tests:
`logits[example, time, previous id]`, backend-neutral (keras.ops only), and
greedy decoding of such a table in NumPy, one row at a time."""

import numpy as np
from keras import ops


def table_step(logits):
    """`step(ids, state, time)` over `logits` `(examples, steps, V, V)`; the
    state is each row's example (which a search tiles with its beams), and
    times past the table read its last step."""
    table = ops.convert_to_tensor(logits)
    steps = logits.shape[1]

    def step(ids, state, time):
        rows = ops.take(table, state, axis=0)
        at_time = ops.take(rows, ops.minimum(time, steps - 1), axis=1)
        return ops.take_along_axis(at_time, ops.reshape(ops.cast(ids, "int32"), (-1, 1, 1)), axis=1)[:, 0], state

    return step


def numpy_greedy(logits, end_token, choose):
    """Greedy decoding of `logits` `(examples, steps, V, V)` from the start id
    0: `choose(row_logits, time, ids)` gives each token from a copy of the
    step's logits and the tokens so far; a row ends at `end_token` and is
    padded with it."""
    steps, rows = logits.shape[1], []
    for example in range(len(logits)):
        ids, previous = [], 0
        for time in range(steps):
            token = int(choose(logits[example, time, previous].copy(), time, ids))
            ids.append(token)
            if token == end_token:
                break
            previous = token
        rows.append(ids + [end_token] * (steps - len(ids)))
    return np.array(rows)
