# Raises while it is imported, at line 2.
raise RuntimeError("no model weights here")
