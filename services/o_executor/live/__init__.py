"""The executor in the live system: LiveRun (one StartRun delivery), the dependencies the
loop uses there (deps.py), recording on the log (recorder.py), running tools (tools.py)."""
