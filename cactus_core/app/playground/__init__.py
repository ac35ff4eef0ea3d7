"""The Playground: every rule side by side at one position, the Taylor gap, and the rules'
measured comparison figure."""
