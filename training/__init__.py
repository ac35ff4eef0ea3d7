"""Scripts that build the embedded draft model (data generation, training, measurement)."""
