"""The pytest plugin: the only package that imports pytest."""
