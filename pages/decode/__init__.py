"""The Decode page's panels (pages/decode.py is the page)."""
