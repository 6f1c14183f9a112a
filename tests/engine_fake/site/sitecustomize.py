# The fake engine's own sitecustomize: regdiag's hook must still run it, in every process.
import sys

sys._fake_engine_site_ran = True
