"""Measure a live SGLang or vLLM endpoint, and read the engines' own logs.

client    one HTTP request (plain or streamed), timed per chunk, standard library only
load      R requests at concurrency C, errors kept per request
metrics   vLLM's Prometheus counters and their deltas over a launch
launch    start a server (--launch-cmd), wait for health, stop it by process group
logparse  SGLang "Decode batch" and vLLM "SpecDecoding metrics" lines, one parser per line family
record    run records of kind "server" and "log"; `new_launch`, the launch every live measurement
          (server, engine) and every ingested log starts from; one header builder per record kind
measure   the launches of `probe server`, written to disk as they finish
plan      `probe server`'s options as a ServerRequest, checked into a ServerPlan (what measure runs)
ingest    `ingest-log`: log files into one run of kind "log"
"""
