"""Step through: a request decoded round by round (`run`), each round taken apart into narrated
steps (`view`, `tree_steps`, `narration`) and their pictures (`figures`, `steps`)."""
