"""Data files shipped with the package (class names, the shipped model)."""
