"""Task glue (data preparation, decoding, metrics) built on the models."""
