"""The fleet simulator, its history recorder and its invariant checker."""
