"""How close synthesised speech is to a recording of the same sentence: DTW-aligned mel distance,
duration ratio and voicing agreement (free-running evaluation)."""
