"""The speculative decoder: a round (its proposal, verdict and recording: `RoundOutcome`), its
statistics and the trace it writes, which `replay.reverify` replays under another rule."""
