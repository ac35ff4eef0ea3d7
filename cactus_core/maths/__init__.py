"""The mathematics of speculative sampling, with torch only: rules, verification, the exact
emitted distribution, the limit, sampling and input validation. Nothing here loads a model."""
