"""Code generated from proto/herald/v1 by `make proto`; never edited by hand."""
