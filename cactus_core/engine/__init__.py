"""Models and decoding: loading pairs, KV caches, the speculative decoder and its trace."""
