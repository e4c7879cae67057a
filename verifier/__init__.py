"""taso.verifier (see DESIGN.md)."""
