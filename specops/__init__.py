"""specops: speculative decoding for vLLM on Kubernetes, kept right for the load."""

__version__ = "0.1.0"

__all__ = ["__version__"]
