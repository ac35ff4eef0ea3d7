"""Sweeps: run a grid of settings on a prompt set, cached and resumable, locally or on Ray; sweep
files; the shipped reference sweep."""
