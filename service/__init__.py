"""A shared judging service: clients send a problem and a candidate over HTTP and read back the verdict judging
stores for it. Its own package, above judging: it adds an HTTP front (Starlette and uvicorn, the `serve` extra), who
may ask (tokens, limits) and a durable queue (db.jobs) in front of judging.judge.judge_and_store, which runs every
candidate in jailed children; nothing here runs candidate code. The CLI's `kforge serve` starts it; client.py
calls it."""
