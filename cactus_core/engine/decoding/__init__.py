"""The speculative decoder: a round (draft, verify, emit, record), its statistics and the trace
it writes, which `trace.reverify` replays under another rule."""
