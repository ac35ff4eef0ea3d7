"""Drafting: the `Drafter` protocol and its implementations (an independent draft model, the
feature-conditioned draft on the verifier's own features), and the feature draft model."""
