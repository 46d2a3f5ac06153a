"""One XLA compilation per program in a JAX test worker.

JAX keys its in-memory cache of compiled programs by the traced function,
and a decoder's loop body is a new closure on every eager call: each call
of a decoder compiles its loop again, even when an earlier call (or test)
compiled the very same program. Here the worker keeps each compiled
executable under the key JAX's persistent cache gives it (a hash of the
program, the devices, the compile options and the jaxlib version), in
memory only: JAX's persistent cache on disk would do the same, but jaxlib
0.10.2 crashed a worker writing an entry (segmentation fault in
`compilation_cache.put_executable_and_time`, the CI run of 850e62c).

Measured on test_runtime_options' per-example values and seeds under JAX:
167 -> 108 s. Programs with host callbacks are compiled as JAX does (their
callbacks are baked into the executable). Only the tests install this; the
library leaves JAX's caching alone.
"""

import collections

# A worker's suite compiles a few thousand programs; the oldest go first.
KEPT = 4096

counts = {"compiled": 0, "reused": 0}


def install():
    """Route JAX's compilations through the worker's memo; False (and
    nothing changed) where this JAX lays out its compiler otherwise."""
    try:
        from jax._src import cache_key, compiler
    except ImportError:
        return False
    compile_or_get_cached = getattr(compiler, "compile_or_get_cached", None)
    if compile_or_get_cached is None or not hasattr(cache_key, "get"):
        return False
    kept = collections.OrderedDict()

    def compile_once(backend, computation, devices, compile_options, host_callbacks, *rest, **options):
        def compile_now():
            return compile_or_get_cached(
                backend, computation, devices, compile_options, host_callbacks, *rest, **options
            )

        if host_callbacks:
            return compile_now()
        key = cache_key.get(computation, devices, compile_options, backend)
        executable = kept.get(key)
        if executable is None:
            counts["compiled"] += 1
            executable = kept[key] = compile_now()
            if len(kept) > KEPT:
                kept.popitem(last=False)
        else:
            counts["reused"] += 1
            kept.move_to_end(key)
        return executable

    compiler.compile_or_get_cached = compile_once
    return True
