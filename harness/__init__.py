"""skilltrial: paired A/B evaluation of Claude Code Skills in hardened Docker sandboxes."""

__version__ = "0.1.0"
__all__ = ["__version__"]
