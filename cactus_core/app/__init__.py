"""The app's logic and Plotly figures without Streamlit: everything a page shows is computed
here, so it can be tested without a browser. One folder per page, with pages/ drawing it:

- `shared`: what more than one page shows (the sidebar's settings, links, limits, metric
  definitions, table cells, rule colours, the pair cache, figures, the transcript's words, a
  position and the rules side by side at it, a tree round's view, the k tuner's view);
- `overview`: the guided tour and the round's diagram;
- `decode`: a Decode run and its views, the race, "Why drafts get rejected", the replay, a
  round's cost;
- `step`: Step through's run, steps, narration and figures;
- `playground`: every rule at one position, the Taylor gap, the rules' comparison figure;
- `frontier`: the Frontier's figures, the reference, the tuner's and the tasks' views, the
  sweep file, "Use this setting".
"""
