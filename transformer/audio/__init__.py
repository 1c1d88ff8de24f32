"""Chapter 10's speech classifier: spoken digits (data), the encoder over log-mel frames (model), its training."""
