"""The application layer: one function per command, the preflight before any work, one Result shape."""
