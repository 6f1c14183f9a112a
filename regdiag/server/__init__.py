"""Measure a live SGLang or vLLM endpoint, and read the engines' own logs.

client    one HTTP request (plain or streamed), timed per chunk, standard library only
load      R requests at concurrency C, errors kept per request
metrics   vLLM's Prometheus counters and their deltas over a launch
launch    start a server (--launch-cmd), wait for health, stop it by process group
logparse  SGLang "Decode batch" and vLLM "SpecDecoding metrics" lines
record    run records of kind "server" and "log"
measure   the launches of `probe server`, written to disk as they finish
"""
