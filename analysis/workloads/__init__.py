"""Per-workload analysis: each module turns its workload's captures into metrics and
declares the summary columns, comparisons, plots and report sections of its campaigns
(the interface is analysis/workloads/base.py; the catalogue is config/catalogue.py)."""
