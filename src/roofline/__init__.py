"""roofline: the speed limit of LLM decoding, measured against what engines deliver."""

__version__ = "0.1.0"
