"""codegym: infrastructure to train, test and evaluate code models."""

__version__ = "0.1.0"
__all__ = ["__version__"]
