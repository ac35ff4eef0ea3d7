"""The Overview, the default page: app.py runs `page.overview()` as a function. It has no script
in pages/ (a script there named like it would take its reruns, without the sidebar)."""
