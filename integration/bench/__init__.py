"""Performance harness (issue 4): see run.py."""
