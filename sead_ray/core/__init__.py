"""The small core every part stands on: typed loading, the config schema and its loading, model references, jsonl,
tolerant JSON parsing, the weight-transport table.
"""
