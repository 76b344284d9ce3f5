"""The engine at work: the model runner (prefill and decode passes on the kernels), the KV slots'
scheduler with continuous batching, the exact prefix cache, sampling and speculative decoding."""
