"""Quality: do the answers get worse? Paired task-score and loop differences, the task set, the
tuner that keeps quality and its shipped reference."""
