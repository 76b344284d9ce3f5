"""The engine's numba kernels: one decode pass over a batch of rows (`decode.decode_rows`), the
layer maths and attention they run, the stored weight formats widened in registers, and numba's
cache of them, stamped with every source a kernel inlines. Nothing here imports the runtime or
the server."""
