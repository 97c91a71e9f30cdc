"""Test-only plugin whose import fails, as if a dependency were missing."""
raise ImportError("missing dep xyz")
