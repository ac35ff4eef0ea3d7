"""What the pages share: the session, the pair, the sidebar, the navigation, the rule picker,
the links, the tour's landing, and the panels two pages show."""
