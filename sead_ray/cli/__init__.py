"""The `sead-ray` command line."""
