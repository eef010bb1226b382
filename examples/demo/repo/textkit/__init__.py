"""textkit: a tiny text and statistics toolkit (the demo repository under test)."""
