"""`probe engine`: per-phase timing inside a user's own engine through an injected hook.

presets       the phase targets of released engines
precheck      every target checked in the installed engine's source, never imported
source_check  the script precheck runs on the engine's host (standard library only)
plan          the command's options as an EngineRequest, checked into an EnginePlan (record + probe)
run           the launches: start the engine under the hook, drive it, combine the hook's streams
profiled      --profile: the launch's profile from the hook's footers
"""
