"""After the runs: reading run directories, report tables and pages, comparisons, Fixit repair data,
and the `ptxbench` command."""
