"""Measure an OpenAI-compatible endpoint: streaming client, workloads, load generation, metrics, run
folders."""
