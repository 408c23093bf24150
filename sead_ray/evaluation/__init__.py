"""The evidence: metrics, significance tests, compare, report, judge, and simcheck with its adversarial battery."""
