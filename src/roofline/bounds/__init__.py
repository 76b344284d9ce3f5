"""Pure functions from bytes, FLOPs and machine figures to speed limits: decode, prefill, parallel,
speculative, cost."""
