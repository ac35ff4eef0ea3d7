"""The Frontier page: its figures, the shipped reference, the tuner's and the tasks' views, the
sweep file, the k tuner's view, and "Use this setting" (`engine_export`, `export_setting`)."""
