"""The Frontier page's panels (pages/frontier.py is the page)."""
