"""taso.generator (see DESIGN.md)."""
