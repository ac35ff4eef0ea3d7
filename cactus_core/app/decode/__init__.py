"""The Decode page: a run's request and views (`run`), the race, "Why drafts get rejected"
(`rescue`), a replay's KL beside the run's, and a round's cost in verifier steps (`speed`)."""
