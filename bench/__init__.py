"""`make bench`: speed figures, each a ratio against a baseline measured in the same run."""
