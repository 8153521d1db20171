"""Results as their own stage: the on-disk layout of campaigns and runs, its format
version and upgrades, and atomic writes. Imports nothing that emulates, so a campaign
copied to a laptop can be read, re-analysed and reported."""
