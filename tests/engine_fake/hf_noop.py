"""An "engine" that runs and exits without importing the module its phase target lives in."""

print("done")
