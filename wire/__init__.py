"""Wire formats shared by the schemes that write them (hosts/) and the analysis that reads
them from captures (analysis/): header sizes, option walking, Quick-Start and Blitzstart."""
