"""A decoder step read from a table, for the searches' brute-force tests:
`logits[example, time, previous id]`, backend-neutral (keras.ops only)."""

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
