"""What timing a CUDA call from another process costs: a trusted process T records its own timing events around
interprocess events that a server process C waits on (`go`) and records (`done`) around its call, as a forward
server on CUDA would be timed; against C's own in-process events (kforge's CUDA timing today). Prints, per call
size, both medians, the same for an empty call (the constant the trusted path adds), and the trusted median
with that constant taken off. `pre` enqueues C's call before T records `go`: invalid, since a stream waits on an
event's last record at the time of the wait (its p10 shows calls timed before they ran).

    python benchmarks/cuda_cross_process_timing.py      # on a CUDA machine; writes $OUT/xproc.json
"""
import os, sys, time, json, statistics
import torch, torch.multiprocessing as mp

def kernel_fn(kind, x, w):
    if kind == "relu": return torch.relu(x) * 2.0 + 1.0
    if kind == "add": return x + 1.0
    if kind == "mm": return x @ w
    raise ValueError(kind)

def shapes(kind):
    return {"tiny": ((16, 1024), None), "small": ((256, 16384), None), "big": ((4096, 16384), None),
            "mm2k": ((2048, 2048), (2048, 2048)), "mm8k": ((8192, 8192), (8192, 8192))}[kind]

def cand(conn, x, w, go_h, done_h, op, late, pre=False):
    torch.cuda.set_device(0)
    s = torch.cuda.Stream()
    go = torch.cuda.Event.from_ipc_handle(0, go_h)
    done = torch.cuda.Event.from_ipc_handle(0, done_h)
    side = torch.cuda.Stream()
    big = torch.randn(8192, 8192, device="cuda") if late else None
    ys = []
    with torch.cuda.stream(s):
        while True:
            msg = conn.recv()
            if msg is None: break
            s.wait_event(go)
            y = kernel_fn(op, x, w) if op != "none" else None
            done.record(s)
            if late:
                with torch.cuda.stream(side):
                    side.wait_event(done)
                    for _ in range(late): big @ big
            ys.append(y)
            if len(ys) > 2: ys.pop(0)
            conn.send(y if msg == "first" else 1)
    conn.close()

def inproc(op, x, w, flush, n):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]; ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        flush.zero_(); starts[i].record(); y = kernel_fn(op, x, w); ends[i].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in zip(starts, ends)]

def xproc(op, x, w, flush, n, late=0, pre=False):
    go = torch.cuda.Event(interprocess=True); done = torch.cuda.Event(interprocess=True)
    go.record(); done.record(); torch.cuda.synchronize()
    a, b = mp.Pipe()
    p = mp.get_context("spawn").Process(target=cand, args=(b, x, w, go.ipc_handle(), done.ipc_handle(), op, late))
    p.start()
    t = torch.cuda.Stream()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]; ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    hosts = []
    with torch.cuda.stream(t):
        for i in range(n + 5):
            k = i - 5
            if pre:
                h0 = time.perf_counter()
                a.send("first" if i == 0 else 1)
                r = a.recv()   # C has enqueued wait(go), kernel, done
                flush.zero_()
                if k >= 0: starts[k].record(t)
                go.record(t)
            else:
                flush.zero_()
                if k >= 0: starts[k].record(t)
                go.record(t)
                h0 = time.perf_counter()
                a.send("first" if i == 0 else 1)
                r = a.recv()
            hosts.append((time.perf_counter() - h0) * 1e6)
            t.wait_event(done)
            if k >= 0: ends[k].record(t)
        torch.cuda.synchronize()
    a.send(None); p.join()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)], statistics.median(hosts)

def med(v): return statistics.median(v)

if __name__ == "__main__":
    mp.set_start_method("spawn")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    out = {}
    for kind in ["tiny", "small", "big", "mm2k"]:
        xs, ws = shapes(kind)
        op = "mm" if ws else "relu"
        x = torch.randn(*xs, device="cuda"); w = torch.randn(*ws, device="cuda") if ws else None
        n = 200 if not kind.startswith("mm8") else 50
        inproc(op, x, w, flush, 10)
        ip = inproc(op, x, w, flush, n)
        xp, host = xproc(op, x, w, flush, n)
        ip2 = inproc(op, x, w, flush, n)
        row = {"inproc_ms": med(ip), "inproc2_ms": med(ip2), "xproc_ms": med(xp), "xproc_p10": sorted(xp)[n//10], "xproc_p90": sorted(xp)[9*n//10],
               "inproc_p10": sorted(ip)[n//10], "inproc_p90": sorted(ip)[9*n//10], "host_roundtrip_us": host}
        pp, _ = xproc(op, x, w, flush, n, pre=True)
        row["pre_ms"] = med(pp); row["pre_p10"] = sorted(pp)[n//10]; row["pre_p90"] = sorted(pp)[9*n//10]
        e1, _ = xproc("none", x, w, flush, n)
        e2, _ = xproc("none", x, w, flush, n, pre=True)
        row["empty_ms"] = med(e1); row["empty_pre_ms"] = med(e2)
        row["xproc_minus_empty"] = med(xp) - med(e1); row["pre_minus_empty"] = med(pp) - med(e2)
        out[kind] = row
        print(kind, json.dumps({k: round(v, 4) for k, v in row.items()}), flush=True)
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "xproc.json"), "w"), indent=1)
