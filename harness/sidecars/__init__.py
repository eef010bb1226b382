"""Code that runs inside containers (standard library only; never imported by the controller)."""
