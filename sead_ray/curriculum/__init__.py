"""SEAD's Profile Controller: Mistake Analysis (CR per state, bands, weights) and the controller that samples profiles
from it under the N_max cap.
"""
