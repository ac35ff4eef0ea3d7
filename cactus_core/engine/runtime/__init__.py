"""What runs the models fast: KV caches that roll back, packed bfloat16 linears, the LM heads
(`fast_head`, `subset_head`) and grouped-query attention read in place."""
