"""Text (the layer above analysis): units (the one time and byte formatter), the
text tables, and what a capture prints (printout). Imports analysis, the model
and the base modules only; export/ and the entry points use it."""
