"""What is computed from the model (the layer above it): views, diff, stats,
merge, sampled stacks, the pstats dict, timeline queries. Imports the model and
the base modules (errors, files) only."""
