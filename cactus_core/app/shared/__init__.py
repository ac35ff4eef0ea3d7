"""What more than one page shows: the sidebar's settings, links, limits, metric definitions,
tables, rule colours, the pair cache, base figures, the transcript's words, positions, the rules
side by side at a position, and a tree round's view and figure."""
