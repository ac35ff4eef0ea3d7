"""The app's logic and Plotly figures without Streamlit: everything a page shows is computed
here, so it can be tested without a browser.

- `settings`: the sidebar's AppSettings (built around SamplingSettings), the models a public
  server offers by label, and the rules as widgets offer them, read from the rules' metadata;
- `positions`: one position (p, q, the drafted token), the presets and the table's checks;
- `playground`: every rule side by side at a position, its parameters grouped into widgets,
  and the Taylor closed form against the exact root;
- `decode_view`: a Decode run (its request, output, replay and speed comparison) and the views
  of its trace (counters, round tables, the inspector);
- `transcript`: token fates, the transcript's HTML and the chips' Markdown;
- `metrics`: the metric definitions and the speed model;
- `limits`: how much work one click may start (prompt length, sweep size), and the checks;
- `pair_cache`: the process-wide LRU of loaded model pairs ("warm" is "in the cache");
- `figures`, `frontier_figures`: Plotly builders.
"""
