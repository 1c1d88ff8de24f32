"""The full encoder-decoder Transformer, assembled from the chapters' reference parts."""
from .model import Memory, Transformer, TransformerConfig, count_parameters

__all__ = ["Memory", "Transformer", "TransformerConfig", "count_parameters"]
