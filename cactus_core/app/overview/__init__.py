"""The Overview page: the guided tour's stops and the round's diagram."""
