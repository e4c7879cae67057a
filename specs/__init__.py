"""taso.specs (see DESIGN.md)."""
